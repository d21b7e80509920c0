"""Rule embed: every shard of both modalities of one benchmark through one loaded model."""

from pathlib import Path

from vlbench.embedding.job import EmbeddingJob, run
from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_files import MatrixFiles
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    identity = dict(snakemake.params.identity)
    job = EmbeddingJob(
        model=dict(snakemake.params.model),
        identity=identity,
        # Result keys come as params; speed knobs (RUN_TIME_KEYS) from the config, so that
        # changing them reruns nothing.
        settings=EmbedSettings.from_config(
            snakemake.wildcards.benchmark,
            {**snakemake.config["embedding"], **identity["embedding"]},
            threads=snakemake.threads,  # after --set-threads and the --cores cap
            pixel_cache_dir=snakemake.params.pixel_cache_dir,
        ),
        sources={"image": Path(snakemake.input.images), "text": Path(snakemake.input.texts)},
        outputs={
            modality: MatrixFiles(
                Path(snakemake.output[modality]),
                Path(snakemake.output[f"{modality}_ids"]),
                Path(snakemake.output[f"{modality}_provenance"]),
            )
            for modality in ("image", "text")
        },
        resume_dir=Path(snakemake.params.resume_dir),
    )
    for modality, records in run(job).items():
        reused = sum(record["reused"] for record in records)
        log.info("%s: %d shard(s), %d of them reused", modality, len(records), reused)
