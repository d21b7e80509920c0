"""Rule per_class: zero-shot top-1/top-5 accuracy per true class."""

from vlbench.warm.client import hand_over_script

# In the rule's own process: run this script in a warm worker's child (see the module).
hand_over_script(snakemake, globals())

import json

from vlbench.metrics.job import write_per_class
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    with open(snakemake.input.meta, encoding="utf-8") as handle:
        meta = json.load(handle)
    classes = write_per_class(
        snakemake.input.ranks,
        {
            "benchmark": snakemake.wildcards.benchmark,
            "subset": meta.get("subset") or meta["split"],
            "model": snakemake.wildcards.model,
        },
        snakemake.output.per_class,
    )
    log.info("%d classes", classes)
