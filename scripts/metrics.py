"""Rule metrics: the protocol's metrics, intervals and chance levels from one direction's ranks."""

from vlbench.warm.client import hand_over_script

# In the rule's own process: run this script in a warm worker's child (see the module).
hand_over_script(snakemake, globals())

import json

from vlbench.metrics.job import write_metrics
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    with open(snakemake.input.meta, encoding="utf-8") as handle:
        meta = json.load(handle)
    rows = write_metrics(
        snakemake.input.ranks,
        protocol=snakemake.params.protocol,
        ks=list(snakemake.params.k),
        labels={
            "benchmark": snakemake.wildcards.benchmark,
            "subset": meta.get("subset") or meta["split"],
            "model": snakemake.wildcards.model,
            "direction": snakemake.wildcards.direction,
        },
        tie_policy=snakemake.params.tie_policy,
        stats=dict(snakemake.params.stats),
        metrics_path=snakemake.output.metrics,
        outcomes_path=snakemake.output.outcomes,
    )
    log.info("%d metric rows", rows)
