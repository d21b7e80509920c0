# What the rule files share, decided once at parse time. The run's plan (one call,
# vlbench.planning.plan), the embed jobs' cut, one wildcard_constraints block, and the input and
# param functions that read the run's config. Each rule file imports the paths it names
# (vlbench.paths) and the pure input functions it uses (vlbench.planning.rule_inputs).

import functools
import re
from pathlib import Path

from snakemake.logging import logger

from vlbench.errors import VlbenchError
from vlbench.paths import FOLD_CLASSIFIERS
from vlbench.planning.checks import (
    check_precisions_here,
    local_checkpoint,
    model_spec_for_job,
)
from vlbench.planning.embed_cut import embed_cut
from vlbench.planning.invocation import executes_jobs
from vlbench.planning.job_params import JobParams
from vlbench.planning.plan import plan
from vlbench.planning.rule_inputs import EmbedJobs
from vlbench.planning.run_claim import claim_directory
from vlbench.planning.run_end import say_last, stop_cleanly_on_interrupt

# A run killed outright leaves Snakemake's lock files behind: the main process of every run holds
# a kernel lock on the directory while it lives, and one that can take it removes the lock files
# no live run holds (vlbench.planning.run_claim), so the same command resumes the run.
# Ctrl-C reaches the main process alone, which stops the jobs and ends on one line, exit 130
# (vlbench.planning.run_end).
if workflow.is_main_process:
    for _line in claim_directory():
        logger.warning(_line)
    stop_cleanly_on_interrupt()

# The default experiment applies only when no --configfile is given. The plan reads the config
# files and --config (typed by the schema), the lock file's pins and the local data, and prints
# one table of every model and benchmark; entries whose local data is missing are left out
# (missing_data: skip; not_run.csv) or refuse the plan. A VlbenchError is one line, then exit 1.
try:
    PLAN = plan(
        list(workflow.overwrite_configfiles) or [Path(workflow.basedir) / "config" / "config.yaml"],
        dict(workflow.config_settings.config),
        schema_path=workflow.source_path("../schemas/config.schema.yaml"),
        reference_dir=Path(workflow.basedir) / "config" / "reference",
    )
except VlbenchError as error:
    logger.error(f"vlbench error: {error}")
    raise SystemExit(1) from None
logger.info(PLAN.preflight_report)
config.clear()
config.update(PLAN.config)
MODELS, BENCHMARKS, PAPER_TABLES = PLAN.models, PLAN.benchmarks, PLAN.paper_tables

# embedding.jobs (auto: by where the jobs run, vlbench.planning.embed_cut, printed) decides the
# wildcards of the embed jobs and so which (model, benchmark) pairs each covers.
EMBED_CUT = embed_cut(config["embedding"]["jobs"], workflow)
logger.info(EMBED_CUT.line())
config["embedding"]["jobs"] = EMBED_CUT.jobs
EMBED = EmbedJobs(EMBED_CUT.jobs, MODELS, BENCHMARKS)
# Fingerprints of the user files each job reads, and each model's embedding identity.
JOB_PARAMS = JobParams(config)

# On a cluster these light rules (seconds on summaries and parquet metadata) run on the submitting
# host: a queued job per metric, table or plot would cost more than the work (docs/cluster.md).
localrules: all, embedding_identity, gather_embeddings, fewshot, folds, paired_tests, tables, benchmark_table, paper_table, paper_summary, plot_benchmark, provenance, export_results, leaderboard


wildcard_constraints:
    model="|".join(map(re.escape, MODELS)),
    benchmark="|".join(map(re.escape, BENCHMARKS)),
    table="|".join(map(re.escape, PAPER_TABLES)) or "no-paper-table",
    classifier="|".join(FOLD_CLASSIFIERS),


def planning_refusal(error):
    """What a job parameter raises to refuse the plan: Snakemake's error, and the cause again
    as the run's last line (after Snakemake's frames)."""
    say_last([f"vlbench error: {error}"])
    return WorkflowError(str(error))


def pinned():
    """Pin on first use: in a run that executes jobs (not a dry run, lint, report, ...), the
    first parameter that reads a hub commit resolves the missing ones and locks them into the
    config's lock file; otherwise the lock is only read."""
    if PLAN.first_use.pending and executes_jobs(workflow):
        try:
            info, warnings = PLAN.first_use.resolve_into(config)
        except VlbenchError as error:
            raise planning_refusal(error) from None
        for line in info:
            logger.info(f"vlbench pins: {line}")
        for line in warnings:
            logger.warning(f"vlbench warning: {line}")


@functools.cache
def checked_on_this_machine():
    """Once, before any job of a run that executes them here (not on cluster nodes): what this
    machine cannot do, refused naming the config key (fp16 with no GPU)."""
    if executes_jobs(workflow) and workflow.executor_plugin.common_settings.local_exec:
        try:
            check_precisions_here(config, MODELS)
        except VlbenchError as error:
            raise planning_refusal(error) from None


def benchmark_source(wildcards):
    """The validated source mapping of a benchmark (with its pinned commit)."""
    pinned()
    return config["benchmarks"][wildcards.benchmark]["source"]


def embed_model_params(wildcards):
    """Per model of one embed job: the spec it loads (random-init models load their rule-made
    checkpoint) and its embeddings' identity."""
    pinned()
    checked_on_this_machine()
    return {
        model: {
            "spec": model_spec_for_job(model, config["models"][model]),
            "identity": JOB_PARAMS.embedding_identity(model),
        }
        for model in EMBED.models_of(wildcards)
    }


def embed_weights(wildcards):
    """The local checkpoint files the models of one embed job load (random-init ones are made
    by a rule)."""
    return [
        path
        for model in EMBED.models_of(wildcards)
        for path in local_checkpoint(model, config["models"][model])
    ]
