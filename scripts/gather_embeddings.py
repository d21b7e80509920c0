"""Rule gather_embeddings: concatenate a modality's shards into one matrix, ids and provenance."""

from pathlib import Path

from vlbench.embedding.shard_files import gather_shards
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    rows = gather_shards(
        list(snakemake.input.embeddings),
        list(snakemake.input.ids),
        list(snakemake.input.provenance),
        Path(snakemake.output.embeddings),
        Path(snakemake.output.ids),
        Path(snakemake.output.provenance),
        shard_timings=list(snakemake.input.timings),
    )
    log.info("gathered %d rows from %d shard(s)", rows, len(snakemake.input.embeddings))
