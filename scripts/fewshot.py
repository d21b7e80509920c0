"""Rule fewshot: few-shot accuracy (BioCLIP's protocol) from the cached image embeddings."""

import json

from vlbench.embedding.matrix_files import load_embeddings
from vlbench.metrics.fewshot_job import write_fewshot
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    with open(snakemake.input.meta, encoding="utf-8") as handle:
        meta = json.load(handle)
    rows = write_fewshot(
        load_embeddings(snakemake.input.embeddings, snakemake.input.ids),
        snakemake.input.images,
        dict(snakemake.params.fewshot),
        {
            "benchmark": snakemake.wildcards.benchmark,
            "subset": meta.get("subset") or meta["split"],
            "model": snakemake.wildcards.model,
        },
        float(snakemake.params.confidence),
        snakemake.output.metrics,
        log,
    )
    log.info("%d few-shot metric rows", rows)
