# vlbench: CLIP-style retrieval benchmarks, from datasets to the papers' tables.
# Read the DAG stage by stage in workflow/rules/; every key is documented in config/README.md.

from snakemake.utils import min_version

min_version("9.0")


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/embed.smk"
include: "workflow/rules/metrics.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/run_hooks.smk"


rule all:
    input:
        PLAN.all_targets,
    default_target: True
