"""Checkpoint plan_shards: cut one modality of a prepared benchmark into row ranges."""

from vlbench.warm.client import hand_over_script

# In the rule's own process: run this script in a warm worker's child (see the module).
hand_over_script(snakemake, globals())

from vlbench.embedding.shard_files import write_shard_plan
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    count = write_shard_plan(
        snakemake.input.data, snakemake.params.shard_size, snakemake.output.plan
    )
    log.info("%d shard(s) of at most %d rows", count, snakemake.params.shard_size)
