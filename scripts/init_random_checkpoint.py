"""Rule init_random_checkpoint: seeded random weights of a custom architecture, as a checkpoint."""

from vlbench.embedding.models import write_random_checkpoint
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    log.info("random weights for %s, seed %d", snakemake.params.name, snakemake.params.seed)
    write_random_checkpoint(
        snakemake.params.name,
        snakemake.params.model_config,
        snakemake.params.seed,
        snakemake.output[0],
    )
