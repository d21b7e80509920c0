"""Rule embedding_identity: a model's embedding identity, written when it changes (the
trigger of the model's gather jobs)."""

from vlbench.embedding.shard_list import write_identity
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    write_identity(snakemake.output[0], dict(snakemake.params.identity))
    log.info("identity of %s written", snakemake.wildcards.model)
