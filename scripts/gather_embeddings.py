"""Rule gather_embeddings: one (model, benchmark)'s stored shards, as its embed job listed
them, concatenated into the matrices, ids and provenance every later job reads."""

from pathlib import Path

from vlbench.embedding.matrix_files import MatrixFiles
from vlbench.embedding.shard_list import gather_pair, read_identity
from vlbench.paths import EMBEDDING_SHARDS, MODALITIES
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    out = snakemake.output
    rows = gather_pair(
        Path(snakemake.input.shard_list),
        read_identity(snakemake.input.identity),
        Path(
            EMBEDDING_SHARDS.format(
                model=snakemake.wildcards.model, benchmark=snakemake.wildcards.benchmark
            )
        ),
        {
            modality: MatrixFiles(
                Path(out[modality]),
                Path(out[f"{modality}_ids"]),
                Path(out[f"{modality}_provenance"]),
            )
            for modality in MODALITIES
        },
    )
    for modality, count in rows.items():
        log.info("%s: %d rows gathered", modality, count)
