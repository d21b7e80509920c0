"""Rule folds: which images train each fold of a classifier (few-shot or probe) on one
benchmark."""

from vlbench.metrics.folds_job import write_folds
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    rows = write_folds(
        snakemake.input.images,
        snakemake.wildcards.classifier,
        dict(snakemake.params.sampler),
        snakemake.output.folds,
        log,
    )
    log.info("%d fold rows", rows)
