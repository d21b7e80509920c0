# Config loading and validation, wildcard constraints and the small input functions rules share.

import functools
import re
from pathlib import Path

from snakemake.logging import logger

from vlbench.config import pick, result_keys, source_kind, validate_config
from vlbench.shard_files import read_shard_plan, shard_digest
from vlbench.errors import VlbenchError
from vlbench.retrieval import DIRECTIONS
from vlbench.targets import metrics_extra_targets
from vlbench.yaml_files import check_no_duplicate_keys
from vlbench.workflow import (
    check_model_keys,
    local_checkpoint,
    missing_local_paths,
    model_fingerprint,
    model_spec_for_job,
    source_fingerprint,
)

# The default experiment applies only when no --configfile is given, so a user's config file
# evaluates exactly its own models and benchmarks.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


try:
    for _configfile in workflow.configfiles:
        check_no_duplicate_keys(_configfile)
    _validated = validate_config(
        config,
        source=", ".join(map(str, workflow.overwrite_configfiles)) or "config/config.yaml",
        schema_path=workflow.source_path("../schemas/config.schema.yaml"),
    )
    check_model_keys(_validated)
except VlbenchError as error:
    raise WorkflowError(str(error)) from None
# Missing user-supplied paths only warn here, so a dry run can plan a paper table before the
# data is in place; the job that needs a missing path fails with the same one-line message.
for _line in missing_local_paths(_validated):
    logger.warning(f"vlbench warning: {_line}")
config.clear()
config.update(_validated)

MODELS = sorted(config["models"])
BENCHMARKS = sorted(config["benchmarks"])
MODALITY_FILES = {"image": "images.parquet", "text": "texts.parquet"}

# On a cluster these light rules (seconds on summaries and parquet metadata) run on the submitting
# host: a queued job per metric, table or plot would cost more than the work (docs/cluster.md).
localrules: all, plan_shards, metrics, per_class, paired_tests, tables, benchmark_table, paper_table, plot_benchmark, provenance


wildcard_constraints:
    model="|".join(map(re.escape, MODELS)),
    benchmark="|".join(map(re.escape, BENCHMARKS)),
    modality="image|text",
    direction="|".join(DIRECTIONS),


def all_targets():
    """The final targets: metrics tables, per-class tables, paired tests, paper tables, plots."""
    return (
        ["results/tables/metrics.csv"]
        + expand("results/tables/{benchmark}.md", benchmark=BENCHMARKS)
        + metrics_extra_targets(config)
        + TABLE_TARGETS
    )


def benchmark_source(wildcards):
    """The validated source mapping of a benchmark."""
    return config["benchmarks"][wildcards.benchmark]["source"]


def source_input(wildcards):
    """What prepare_benchmark reads locally: the synthetic or local directory; nothing for the hub."""
    source = benchmark_source(wildcards)
    kind = source_kind(source)
    if kind == "synthetic":
        return f"results/sources/{wildcards.benchmark}"
    if kind == "path":
        return [source["path"]] if Path(source["path"]).is_dir() else []
    return []


# Content tracking: a fingerprint of every user-supplied file a job reads is one of its params,
# so an edit anywhere in a benchmark folder or a model file reruns exactly the jobs that read it
# (computed once per parse; one stat per file, see vlbench.fingerprints).
@functools.cache
def _source_fingerprint(benchmark):
    return source_fingerprint(config["benchmarks"][benchmark]["source"])


@functools.cache
def _model_fingerprint(model):
    return model_fingerprint(config["models"][model])


def source_files_fingerprint(wildcards):
    """Fingerprint of the user-supplied files of a benchmark's source ("" for hub sources)."""
    return _source_fingerprint(wildcards.benchmark)


def model_files_fingerprint(wildcards):
    """Fingerprint of the user-supplied files of a model (model_config, local weights)."""
    return _model_fingerprint(wildcards.model)


def checkpoint_input(wildcards):
    """The local checkpoint file a model loads, if any; random-init checkpoints are made by a rule."""
    return local_checkpoint(wildcards.model, config["models"][wildcards.model])


def query_and_gallery(wildcards):
    """Query and gallery modality of a direction."""
    return DIRECTIONS[wildcards.direction]


# Embedding shards (workflow/rules/embed.smk): pixel cache location and the gather's inputs.
PIXEL_CACHE_DIR = "results/pixels"


def shard_content_digest(wildcards):
    """The content digest of an embedding shard's rows, from the shard plan."""
    return shard_digest(
        f"results/shards/{wildcards.benchmark}/{wildcards.modality}.json", wildcards.shard
    )


def embedding_shards(wildcards):
    """The shard files and shard timings a gathered matrix is made of (after the shard plan)."""
    plan = checkpoints.plan_shards.get(
        benchmark=wildcards.benchmark, modality=wildcards.modality
    ).output.plan
    names = sorted(read_shard_plan(plan)["shards"])
    stem = f"{wildcards.model}/{wildcards.benchmark}/{wildcards.modality}"
    return {
        "embeddings": [f"results/embeddings/{stem}/{name}.npy" for name in names],
        "ids": [f"results/embeddings/{stem}/{name}.ids.parquet" for name in names],
        "provenance": [f"results/embeddings/{stem}/{name}.json" for name in names],
        "timings": [f"results/timings/embed_shard/{stem}/{name}.tsv" for name in names],
    }
