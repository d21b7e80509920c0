"""Rule probe: a probe classifier trained and scored on a model's cached image embeddings."""

import json

import torch

from vlbench.embedding.shard_files import load_embeddings
from vlbench.metrics.probe_job import write_probe
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    torch.set_num_threads(snakemake.threads)
    with open(snakemake.input.meta, encoding="utf-8") as handle:
        meta = json.load(handle)
    rows = write_probe(
        snakemake.wildcards.classifier,
        load_embeddings(snakemake.input.embeddings, snakemake.input.ids),
        snakemake.input.images,
        snakemake.input.folds,
        dict(snakemake.params.settings),
        {
            "benchmark": snakemake.wildcards.benchmark,
            "subset": meta.get("subset") or meta["split"],
            "model": snakemake.wildcards.model,
        },
        float(snakemake.params.confidence),
        snakemake.output.metrics,
        log,
    )
    log.info("%d probe metric rows", rows)
