"""Rule metrics: Recall@k with 95% t-intervals from one direction's ranks."""

import json

import polars as pl

from vlbench.atomic import atomic_path
from vlbench.retrieval import recall_rows
from vlbench.workflow import rule_log

with rule_log(snakemake.log[0]) as log:
    with open(snakemake.input.meta, encoding="utf-8") as handle:
        subset = json.load(handle)["split"]
    rows = recall_rows(
        pl.read_parquet(snakemake.input.ranks),
        snakemake.params.k,
        benchmark=snakemake.wildcards.benchmark,
        subset=subset,
        model=snakemake.wildcards.model,
        direction=snakemake.wildcards.direction,
    )
    with atomic_path(snakemake.output.metrics) as tmp:
        rows.write_csv(tmp)
    log.info("%d metric rows", rows.height)
