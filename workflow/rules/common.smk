# Everything the rule files share, decided once at parse time. The validated config, the model,
# benchmark and paper-table lists, the final targets, one wildcard_constraints block, and the
# input and param functions of the rules; the later rule files do no module-level work.

import functools
import re
from pathlib import Path

from snakemake.logging import logger

from vlbench.config import EMBED_JOB_WILDCARDS, pick, result_keys, source_kind
from vlbench.errors import VlbenchError
from vlbench.data.sources.spec import local_root, protocol_settings
from vlbench.paths import (
    EMBEDDING_FILES,
    EMBEDDING_IDENTITY,
    BENCHMARK_META,
    CLIP_BENCHMARK_DIR,
    COVERAGE_MD,
    EMBEDDING_SHARD_LIST,
    EMBEDDINGS_DIR,
    EXAMPLE_PLOT,
    FAILED_RUN_NOTE,
    FEWSHOT_METRICS,
    EVALUATE_TIMINGS,
    FEWSHOT_TIMINGS,
    GATHER_TIMINGS,
    FRONT_PAGE,
    INDEX,
    LEADERBOARD,
    MODALITIES,
    METRICS_CSV,
    METRICS_FULL,
    MTEB_DIR,
    NOT_RUN_CSV,
    PAIRED_TESTS,
    PIXEL_CACHE_DIR,
    PREPARE_TIMINGS,
    PREPARED_FILES,
    PROBE_CLASSIFIERS,
    FOLDS,
    FOLD_CLASSIFIERS,
    PROBE_METRICS,
    PROBE_TIMINGS,
    RANDOM_CHECKPOINT,
    RANKS,
    STANDINGS_CSV,
    SYNTHETIC_SOURCE,
    TIMINGS_DIR,
    benchmark_table,
    evaluation_outputs as protocol_outputs,
    modality_file,
    paper_table_file,
    plot_file,
    provenance_file,
    synthetic_source,
)
from vlbench.metrics.probe_folds import SAMPLER_KEYS, classifier_settings
from vlbench.protocols import (
    DIRECTIONS,
    evaluation_of,
    evaluations,
    protocol as protocol_record,
)
from vlbench.report.not_run import (
    not_computable_summary,
    not_run_summary,
    read_not_run,
    skipped_images_summary,
)
from vlbench.report.summary import coverage_lines_of
from vlbench.planning.checks import (
    check_precisions_here,
    local_checkpoint,
    model_fingerprint,
    model_spec_for_job,
    source_fingerprint,
)
from vlbench.planning.fingerprints import fingerprint
from vlbench.planning.embed_cut import embed_cut
from vlbench.planning.invocation import executes_jobs
from vlbench.planning.failures import (
    failed_job_causes,
    remove_failed_run_note,
    write_failed_run_note,
)
from vlbench.planning.run_claim import claim_directory
from vlbench.planning.run_end import INTERRUPTED, interrupted, say_last, stop_cleanly_on_interrupt
from vlbench.planning.plan import plan

# A run killed outright leaves Snakemake's lock files behind: the main process of every run holds
# a kernel lock on the directory while it lives, and one that can take it removes the lock files
# no live run holds (vlbench.planning.run_claim), so the same command resumes the run.
# Ctrl-C reaches the main process alone, which stops the jobs and ends on one line, exit 130
# (vlbench.planning.run_end).
if workflow.is_main_process:
    for _line in claim_directory():
        logger.warning(_line)
    stop_cleanly_on_interrupt()

# The default experiment applies only when no --configfile is given, so a user's config file
# evaluates exactly its own models and benchmarks. Config files and --config are read by the
# package: paths relative to the file that writes them, --config typed by the schema.
DEFAULT_CONFIG = Path(workflow.basedir) / "config" / "config.yaml"
REFERENCE_DIR = Path(workflow.basedir) / "config" / "reference"
try:
    PLAN = plan(
        list(workflow.overwrite_configfiles) or [DEFAULT_CONFIG],
        dict(workflow.config_settings.config),
        schema_path=workflow.source_path("../schemas/config.schema.yaml"),
        reference_dir=REFERENCE_DIR,
    )
except VlbenchError as error:
    # The cause is the error's first line: one line, then the run stops (no Snakemake frame).
    logger.error(f"vlbench error: {error}")
    raise SystemExit(1) from None
# One table of every model and benchmark and its state; entries whose local data is missing are
# left out of the run (missing_data: skip) and listed in not_run.csv, or refuse the plan
# (missing_data: fail, or nothing left to run). Unpinned hub downloads take their commit from
# the config's lock file; a run that executes jobs resolves and locks the missing ones when a
# job parameter first asks for a commit (`pinned`, below).
logger.info(PLAN.preflight_report)
config.clear()
config.update(PLAN.config)

MODELS = PLAN.models
BENCHMARKS = PLAN.benchmarks
PAPER_TABLES = PLAN.paper_tables
REFERENCE_CSV = PLAN.reference_csv
REFERENCE_MAP = PLAN.reference_map
# Models and benchmarks left out of the run for missing local data: the paper tables note them,
# not_run.csv lists them with the reason.
NOT_RUN = PLAN.not_run
NOT_RUN_ROWS = PLAN.not_run_rows
ALL_TARGETS = PLAN.all_targets
TABLE_FILES = PLAN.table_files
METRIC_FILES = PLAN.metric_files
OUTCOME_FILES = PLAN.outcome_files

# On a cluster these light rules (seconds on summaries and parquet metadata) run on the submitting
# host: a queued job per metric, table or plot would cost more than the work (docs/cluster.md).
localrules: all, embedding_identity, gather_embeddings, fewshot, folds, paired_tests, tables, benchmark_table, paper_table, paper_summary, plot_benchmark, provenance, export_results, leaderboard


wildcard_constraints:
    model="|".join(map(re.escape, MODELS)),
    benchmark="|".join(map(re.escape, BENCHMARKS)),
    table="|".join(map(re.escape, PAPER_TABLES)) or "no-paper-table",
    classifier="|".join(FOLD_CLASSIFIERS),


# --- Stage 1: benchmark sources ---------------------------------------------------------------


def planning_refusal(error):
    """What a job parameter raises to refuse the plan: Snakemake's error, and the cause again
    as the run's last line (after Snakemake's frames)."""
    say_last([f"vlbench error: {error}"])
    return WorkflowError(str(error))


def pinned():
    """Pin on first use: in a run that executes jobs (Snakemake's executor is set, not a dry
    run), the first parameter that reads a hub commit resolves and locks the missing ones into
    the config; otherwise (dry run, lint, report, DAG, ...) the lock is only read."""
    if PLAN.first_use.pending and executes_jobs(workflow):
        try:
            info, warnings = PLAN.first_use.resolve_into(config)
        except VlbenchError as error:
            raise planning_refusal(error) from None
        for line in info:
            logger.info(f"vlbench pins: {line}")
        for line in warnings:
            logger.warning(f"vlbench warning: {line}")


def benchmark_source(wildcards):
    """The validated source mapping of a benchmark (with its pinned commit)."""
    pinned()
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
    return {
        name: PREPARED_FILES[name].format(benchmark=wildcards.benchmark)
        for name in ("images", "texts", "qrels", "candidates")
    }


# Content tracking: a fingerprint of every user-supplied file a job reads is one of its params,
# so an edit anywhere in a benchmark folder or a model file reruns exactly the jobs that read it
# (computed once per parse; one stat per file, see vlbench.planning.fingerprints).
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


def embedding_identity(model):
    """What a model's embeddings depend on besides the rows: the configured spec (random-init
    seed included), its user files' fingerprint and the settings that change numbers."""
    return {
        "model": config["models"][model],
        "model_files": _model_fingerprint(model),
        "embedding": result_keys(config, "embedding"),
    }


# embedding.jobs (auto: by where the jobs run, vlbench.planning.embed_cut) decides which
# wildcards (model, benchmark) the embed jobs take, as listed in vlbench.config.EMBED_JOB_WILDCARDS.
EMBED_CUT = embed_cut(config["embedding"]["jobs"], workflow)
logger.info(EMBED_CUT.line())
config["embedding"]["jobs"] = EMBED_CUT.jobs
EMBED_WILDCARDS = EMBED_JOB_WILDCARDS[EMBED_CUT.jobs]


def embed_pattern(pattern):
    """A path pattern of one (model, benchmark) as the embed jobs name it (several paths): the
    wildcards of the embed rule stay, the others are filled with every model or benchmark."""
    models = ["{model}"] if "model" in EMBED_WILDCARDS else MODELS
    benchmarks = ["{benchmark}"] if "benchmark" in EMBED_WILDCARDS else BENCHMARKS
    return [
        pattern.replace("{model}", model).replace("{benchmark}", benchmark)
        for model in models
        for benchmark in benchmarks
    ]


def embed_models(wildcards):
    """The models of one embed job, in the order of its outputs."""
    return [wildcards.model] if "model" in EMBED_WILDCARDS else MODELS


def embed_benchmarks(wildcards):
    """The benchmarks of one embed job, in the order of its outputs."""
    return [wildcards.benchmark] if "benchmark" in EMBED_WILDCARDS else BENCHMARKS


def embed_sources(modality):
    """Input function: the canonical parquet files of one modality an embed job reads."""
    return lambda wildcards: [
        PREPARED_FILES[modality].format(benchmark=benchmark)
        for benchmark in embed_benchmarks(wildcards)
    ]


def embed_weights(wildcards):
    """The local checkpoint files the models of one embed job load (random-init ones are made
    by a rule)."""
    return [
        path
        for model in embed_models(wildcards)
        for path in local_checkpoint(model, config["models"][model])
    ]


@functools.cache
def checked_on_this_machine():
    """Once, before any job of a run that executes them here (not on cluster nodes): what this
    machine cannot do, refused naming the config key (fp16 with no GPU)."""
    if executes_jobs(workflow) and workflow.executor_plugin.common_settings.local_exec:
        try:
            check_precisions_here(config, MODELS)
        except VlbenchError as error:
            raise planning_refusal(error) from None


def embed_model_params(wildcards):
    """Per model of one embed job: the spec it loads (random-init models load their rule-made
    checkpoint) and its embeddings' identity."""
    pinned()
    checked_on_this_machine()
    return {
        model: {
            "spec": model_spec_for_job(model, config["models"][model]),
            "identity": embedding_identity(model),
        }
        for model in embed_models(wildcards)
    }


# --- Stages 3-5: one evaluation job per (model, benchmark) ------------------------------------

# The protocols of the configured benchmarks: each has its evaluate_<protocol> rule.
# One evaluate rule per protocol and directions in use (vlbench.protocols.Evaluation).
EVALUATIONS = evaluations(config["benchmarks"])


def benchmarks_pattern(evaluation):
    """The benchmark wildcard's pattern for one evaluate rule."""
    return "|".join(
        re.escape(key)
        for key in BENCHMARKS
        if evaluation_of(config["benchmarks"][key]) == evaluation
    )


def evaluation_outputs(evaluation):
    """The named files an evaluate rule writes."""
    return protocol_outputs(protocol_record(evaluation.protocol), evaluation.directions)


def evaluation_inputs(wildcards):
    """What an evaluation job reads: both modalities' embeddings and the prepared benchmark."""
    stem = EMBEDDINGS_DIR.format(model=wildcards.model, benchmark=wildcards.benchmark)
    inputs = {
        f"{modality}_{kind}": f"{stem}/{modality}{suffix}"
        for modality in ("image", "text")
        for kind, suffix in (("embeddings", ".npy"), ("ids", ".ids.parquet"))
    }
    meta = BENCHMARK_META.format(benchmark=wildcards.benchmark)
    return {**inputs, **prepared_data(wildcards), "meta": meta}


# --- Stage 6: what the tables, examples and provenance read -----------------------------------


def embedding_files(model, benchmark, direction):
    """A direction's query matrix and ids, and its gallery index and ids."""
    query, gallery = DIRECTIONS[direction]
    stem = EMBEDDINGS_DIR.format(model=model, benchmark=benchmark)
    return {
        "queries": f"{stem}/{query}.npy",
        "query_ids": f"{stem}/{query}.ids.parquet",
        "index": INDEX.format(model=model, benchmark=benchmark, modality=gallery),
        "gallery_ids": f"{stem}/{gallery}.ids.parquet",
    }


# The examples job of a benchmark draws one panel per (model, direction), in this order.
EXAMPLE_PANELS = [(model, direction) for model in MODELS for direction in DIRECTIONS]


def benchmark_examples_inputs(wildcards):
    """Every panel's embedding files and ranks, as lists in EXAMPLE_PANELS order (`unpack`)."""
    inputs = {"queries": [], "query_ids": [], "index": [], "gallery_ids": [], "ranks": []}
    for model, direction in EXAMPLE_PANELS:
        for key, path in embedding_files(model, wildcards.benchmark, direction).items():
            inputs[key].append(path)
        inputs["ranks"].append(
            RANKS.format(model=model, benchmark=wildcards.benchmark, direction=direction)
        )
    return inputs


# An embedding job's `benchmark:` and log file, named by the wildcards it has (embedding.jobs).
EMBED_JOB_NAME = (
    str(Path(*(f"{{{name}}}" for name in EMBED_WILDCARDS))) if EMBED_WILDCARDS else "every-model"
)
EMBED_TIMINGS = f"{TIMINGS_DIR}/embed/{EMBED_JOB_NAME}.tsv"
# The `benchmark:` files of a (model, benchmark)'s gather and evaluation jobs.
EMBED_LOG = f"logs/embed/{EMBED_JOB_NAME}.log"


def sampler_settings(wildcards):
    """The keys of a benchmark's few-shot or probe entry that decide its folds (the folds job's
    params)."""
    return pick(
        classifier_settings(config["benchmarks"][wildcards.benchmark], wildcards.classifier),
        *SAMPLER_KEYS[wildcards.classifier],
    )


def benchmark_timings(wildcards):
    """The `benchmark:` files of the jobs on one benchmark (prepare, every embed and evaluate),
    which its provenance page lists."""
    files = [PREPARE_TIMINGS.format(benchmark=wildcards.benchmark)]
    for model in MODELS:
        for pattern in (EMBED_TIMINGS, GATHER_TIMINGS, EVALUATE_TIMINGS):
            files.append(pattern.format(model=model, benchmark=wildcards.benchmark))
    return list(dict.fromkeys(files))  # one embed job may cover every model
