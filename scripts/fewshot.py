"""Rule fewshot: few-shot accuracy (BioCLIP's protocol) from the cached image embeddings, over
the benchmark's few-shot folds."""

from vlbench.embedding.matrix_files import load_embeddings
from vlbench.metrics.fewshot_job import write_fewshot
from vlbench.metrics.fold_rows import row_labels
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    rows = write_fewshot(
        load_embeddings(snakemake.input.embeddings, snakemake.input.ids),
        snakemake.input.images,
        snakemake.input.folds,
        dict(snakemake.params.fewshot),
        row_labels(snakemake.input.meta, snakemake.wildcards.benchmark, snakemake.wildcards.model),
        float(snakemake.params.confidence),
        snakemake.output.metrics,
        log,
    )
    log.info("%d few-shot metric rows", rows)
