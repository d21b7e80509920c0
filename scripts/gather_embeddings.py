"""Rule gather_embeddings: concatenate a modality's shards into one matrix, ids and provenance."""

from vlbench.warm.client import hand_over_script

# In the rule's own process: run this script in a warm worker's child (see the module).
hand_over_script(snakemake, globals())

from pathlib import Path

from vlbench.embedding.shard_files import gather_shards, stored_shards
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    shards = stored_shards(
        snakemake.params.embeddings_dir,
        snakemake.wildcards.modality,
        dict(snakemake.params.digests),
        dict(snakemake.params.identity),
    )
    rows = gather_shards(
        [paths["embeddings"] for paths in shards],
        [paths["ids"] for paths in shards],
        [paths["provenance"] for paths in shards],
        Path(snakemake.output.embeddings),
        Path(snakemake.output.ids),
        Path(snakemake.output.provenance),
        shard_timings=list(snakemake.input.timings),
    )
    log.info("gathered %d rows from %d shard(s)", rows, len(shards))
