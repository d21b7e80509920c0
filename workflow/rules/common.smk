# Everything the rule files share, decided once at parse time. The validated config, the model,
# benchmark and paper-table lists, the final targets, one wildcard_constraints block, and the
# input and param functions of the rules; the later rule files do no module-level work.

import functools
import re
import sys
from pathlib import Path

from snakemake.logging import logger

from vlbench.config import pick, result_keys, source_kind
from vlbench.embedding.shard_files import read_shard_plan
from vlbench.errors import VlbenchError
from vlbench.data.sources.spec import local_root, protocol_settings
from vlbench.paths import (
    EMBED_JOB_RECORD,
    EMBEDDINGS_DIR,
    MODALITY_FILES,
    PIXEL_CACHE_DIR,
    RANDOM_CHECKPOINT,
    SHARD_PLAN,
    SYNTHETIC_SOURCE,
    modality_file,
    shard_plan,
    synthetic_source,
)
from vlbench.protocols import DIRECTIONS
from vlbench.report.not_run import not_run_summary
from vlbench.report.paper_layouts import layouts_for
from vlbench.report.reference import read_map
from vlbench.report.summary import coverage_lines_of
from vlbench.workflow.checks import (
    check_model_keys,
    local_checkpoint,
    model_fingerprint,
    model_spec_for_job,
    source_fingerprint,
)
from vlbench.workflow.data_root import expand_data_root
from vlbench.workflow.fingerprints import fingerprint
from vlbench.workflow.lockfile import lock_path, read_lock
from vlbench.workflow.invocation import plans_only
from vlbench.workflow.pinning import plan_pins
from vlbench.workflow.preflight import (
    drop_missing,
    not_run,
    not_run_rows,
    preflight_rows,
    refuse_missing,
    render,
)
from vlbench.workflow.run_config import load_run_config
from vlbench.workflow.targets import (
    all_targets,
    fewshot_metric_files,
    metric_files,
    outcome_files,
    table_files,
)
from vlbench.warm.client import prewarm

# The default experiment applies only when no --configfile is given, so a user's config file
# evaluates exactly its own models and benchmarks. Config files and --config are read by the
# package: paths relative to the file that writes them, --config typed by the schema.
DEFAULT_CONFIG = Path(workflow.basedir) / "config" / "config.yaml"
REFERENCE_DIR = Path(workflow.basedir) / "config" / "reference"
try:
    _config_files = list(workflow.overwrite_configfiles) or [DEFAULT_CONFIG]
    _validated = load_run_config(
        _config_files,
        dict(workflow.config_settings.config),
        schema_path=workflow.source_path("../schemas/config.schema.yaml"),
    )
    check_model_keys(_validated)
    _validated = expand_data_root(_validated)
    # Pin on first use: unpinned hub downloads take their commit from the config's lock file; a
    # real run (not a dry run, lint or report) first resolves and locks the missing ones.
    _config_path = Path(_config_files[-1])
    _lock = lock_path(_config_path)
    _as_written = _validated
    _validated, _pin_info, _pin_warnings = plan_pins(
        _as_written,
        _lock,
        _config_path.name,
        resolve=workflow.is_main_process and not plans_only(sys.argv[1:]),
    )
    # One table of every model and benchmark and its state; entries whose local data is
    # missing are left out of the run (missing_data: skip) and listed in not_run.csv, or
    # refuse the plan (missing_data: fail, or nothing left to run).
    _preflight = preflight_rows(_as_written, read_lock(_lock))
    for _line in _pin_info:
        logger.info(f"vlbench pins: {_line}")
    logger.info(render(_preflight, f"vlbench preflight of {_config_path} (lock: {_lock}):"))
    refuse_missing(_as_written, _preflight)
    _validated, _preflight = drop_missing(_validated, _preflight)
    REFERENCE_CSV = _validated["tables"]["reference"] or str(
        REFERENCE_DIR / "published_results.csv"
    )
    REFERENCE_MAP = _validated["tables"]["map"] or str(REFERENCE_DIR / "map.yaml")
    _reference_map = read_map(REFERENCE_MAP)
except VlbenchError as error:
    raise WorkflowError(str(error)) from None
for _line in _pin_warnings:
    logger.warning(f"vlbench warning: {_line}")
config.clear()
config.update(_validated)

MODELS = sorted(config["models"])
# Models and benchmarks left out of the run for missing local data (the preflight table): the
# paper tables note them, results/tables/not_run.csv lists them with the reason.
NOT_RUN = not_run(_preflight)
NOT_RUN_ROWS = not_run_rows(_preflight)
BENCHMARKS = sorted(config["benchmarks"])
PAPER_TABLES = [layout.table for layout in layouts_for(BENCHMARKS, _reference_map)]
ALL_TARGETS = all_targets(config, PAPER_TABLES)
TABLE_FILES = table_files(config, PAPER_TABLES)
# Few-shot metric files are metric files too (the tables read them), but have no outcomes.
METRIC_FILES = metric_files(config) + fewshot_metric_files(config)
OUTCOME_FILES = outcome_files(config)

# On a cluster these light rules (seconds on summaries and parquet metadata) run on the submitting
# host: a queued job per metric, table or plot would cost more than the work (docs/cluster.md).
localrules: all, plan_shards, metrics, per_class, fewshot, paired_tests, tables, benchmark_table, paper_table, paper_summary, plot_benchmark, provenance


wildcard_constraints:
    model="|".join(map(re.escape, MODELS)),
    benchmark="|".join(map(re.escape, BENCHMARKS)),
    modality="|".join(MODALITY_FILES),
    direction="|".join(DIRECTIONS),
    shard="shard-[0-9]{5}",
    table="|".join(map(re.escape, PAPER_TABLES)) or "no-paper-table",


# --- Stage 1: benchmark sources ---------------------------------------------------------------


def benchmark_source(wildcards):
    """The validated source mapping of a benchmark."""
    return config["benchmarks"][wildcards.benchmark]["source"]


def benchmark_protocol(wildcards):
    """The protocol of a benchmark."""
    return config["benchmarks"][wildcards.benchmark]["protocol"]


def source_input(wildcards):
    """What prepare_benchmark reads locally: the synthetic or local directory; nothing for the hub."""
    source = benchmark_source(wildcards)
    kind = source_kind(source)
    if kind == "synthetic":
        return synthetic_source(wildcards.benchmark)
    if kind == "path":
        return [source["path"]] if Path(source["path"]).is_dir() else []
    return []


def prepared_data(wildcards):
    """The canonical files of a prepared benchmark (used with `unpack`)."""
    folder = f"results/data/{wildcards.benchmark}"
    return {
        "images": modality_file(wildcards.benchmark, "image"),
        "texts": modality_file(wildcards.benchmark, "text"),
        "qrels": f"{folder}/qrels.parquet",
        "candidates": f"{folder}/candidates.parquet",
    }


# Content tracking: a fingerprint of every user-supplied file a job reads is one of its params,
# so an edit anywhere in a benchmark folder or a model file reruns exactly the jobs that read it
# (computed once per parse; one stat per file, see vlbench.workflow.fingerprints).
@functools.cache
def _source_fingerprint(benchmark):
    return source_fingerprint(config["benchmarks"][benchmark]["source"])


@functools.cache
def _model_fingerprint(model):
    return model_fingerprint(config["models"][model])


def source_files_fingerprint(wildcards):
    """Fingerprint of the user-supplied files of a benchmark's source ("" for hub sources)."""
    return _source_fingerprint(wildcards.benchmark)


# --- Stage 2: embeddings ----------------------------------------------------------------------


def model_files_fingerprint(wildcards):
    """Fingerprint of the user-supplied files of a model (model_config, local weights)."""
    return _model_fingerprint(wildcards.model)


def model_spec(wildcards):
    """The spec an embedding job loads (random-init models load their rule-made checkpoint)."""
    return model_spec_for_job(wildcards.model, config["models"][wildcards.model])


def checkpoint_input(wildcards):
    """The local checkpoint file a model loads, if any; random-init checkpoints are made by a rule."""
    return local_checkpoint(wildcards.model, config["models"][wildcards.model])


def modality_data(wildcards):
    """The prepared parquet of a modality."""
    return modality_file(wildcards.benchmark, wildcards.modality)


def embedding_identity(wildcards):
    """What a model's embeddings depend on besides the rows: the configured spec (random-init
    seed included), its user files' fingerprint and the settings that change numbers."""
    return {
        "model": config["models"][wildcards.model],
        "model_files": model_files_fingerprint(wildcards),
        "embedding": result_keys(config, "embedding"),
    }


def _plan_shards(benchmark, modality):
    """The shard plan of a modality, or None before its checkpoint has run."""
    path = shard_plan(benchmark, modality)
    return read_shard_plan(path) if Path(path).is_file() else None


def shard_job_inputs(wildcards):
    """Both modalities' prepared data and shard plans (`ancient`: the digests decide reruns)."""
    inputs = {}
    for modality in MODALITY_FILES:
        inputs[f"{modality}_data"] = ancient(modality_file(wildcards.benchmark, modality))
        inputs[f"{modality}_plan"] = ancient(shard_plan(wildcards.benchmark, modality))
    return inputs


def shard_content_digests(wildcards):
    """Modality -> content digest of shard k's rows, for each modality whose plan has shard k."""
    digests = {}
    for modality in MODALITY_FILES:
        plan = _plan_shards(wildcards.benchmark, modality)
        if plan and wildcards.shard in plan["digests"]:
            digests[modality] = plan["digests"][wildcards.shard]
    return digests


def modality_shard_digests(wildcards):
    """Shard name -> content digest of every shard of a modality (from its plan)."""
    plan = _plan_shards(wildcards.benchmark, wildcards.modality)
    return dict(sorted(plan["digests"].items())) if plan else {}


def embedding_shards(wildcards):
    """The shard job records and timings a gathered matrix is made after (after the plan)."""
    plan = checkpoints.plan_shards.get(
        benchmark=wildcards.benchmark, modality=wildcards.modality
    ).output.plan
    names = sorted(read_shard_plan(plan)["shards"])
    stem = f"{wildcards.model}/{wildcards.benchmark}"
    return {
        "records": [
            EMBED_JOB_RECORD.format(model=wildcards.model, benchmark=wildcards.benchmark, shard=name)
            for name in names
        ],
        "timings": [f"results/timings/embed_shard/{stem}/{name}.tsv" for name in names],
    }


# --- Stages 3-6: a direction's query matrix and gallery index ---------------------------------


def embedding_files(model, benchmark, direction):
    """A direction's query matrix and ids, and its gallery index and ids."""
    query, gallery = DIRECTIONS[direction]
    stem = f"results/embeddings/{model}/{benchmark}"
    return {
        "queries": f"{stem}/{query}.npy",
        "query_ids": f"{stem}/{query}.ids.parquet",
        "index": f"results/index/{model}/{benchmark}/{gallery}.faiss",
        "gallery_ids": f"{stem}/{gallery}.ids.parquet",
    }


def direction_embeddings(wildcards):
    """`embedding_files` of the job's model, benchmark and direction (used with `unpack`)."""
    return embedding_files(wildcards.model, wildcards.benchmark, wildcards.direction)


# The examples job of a benchmark draws one panel per (model, direction), in this order.
EXAMPLE_PANELS = [(model, direction) for model in MODELS for direction in DIRECTIONS]


def benchmark_examples_inputs(wildcards):
    """Every panel's embedding files and ranks, as lists in EXAMPLE_PANELS order (`unpack`)."""
    inputs = {"queries": [], "query_ids": [], "index": [], "gallery_ids": [], "ranks": []}
    for model, direction in EXAMPLE_PANELS:
        for key, path in embedding_files(model, wildcards.benchmark, direction).items():
            inputs[key].append(path)
        inputs["ranks"].append(f"results/ranks/{model}/{wildcards.benchmark}/{direction}.parquet")
    return inputs


def prewarm_workers(dag_jobs):
    """When a local run starts: start the warm workers its jobs will use, in the background, so
    that their imports happen while the first jobs run (config/README.md, warm_workers)."""
    idle_seconds = config["warm_workers"]["idle_seconds"]
    rules = {job.rule.name for job in dag_jobs}
    # Embedding jobs follow the shard plans, which a checkpoint makes: start for either.
    if rules & {"embed_shard", "plan_shards"}:
        prewarm("embedding", idle_seconds)
    if rules - {"embed_shard"}:
        prewarm("light", idle_seconds)
