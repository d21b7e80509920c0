"""Rule embed: every shard of both modalities through one loaded model, for each (model,
benchmark) of the job (embedding.jobs: one pair, one model on every benchmark, or all)."""

from pathlib import Path

from vlbench.embedding.job import EmbeddingJob, run_models
from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_files import MatrixFiles
from vlbench.paths import EMBEDDING_FILES, EMBEDDING_SHARDS
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    benchmarks = list(snakemake.params.benchmarks)
    images, texts = list(snakemake.input.images), list(snakemake.input.texts)
    files = iter(snakemake.output)  # EMBEDDING_FILES per (model, benchmark), model by model
    jobs = {}
    for model, given in snakemake.params.models.items():
        identity = dict(given["identity"])
        for number, benchmark in enumerate(benchmarks):
            named = {name: Path(next(files)) for name in EMBEDDING_FILES}
            jobs[model, benchmark] = EmbeddingJob(
                model=dict(given["spec"]),
                identity=identity,
                # Result keys come as params; speed knobs (RUN_TIME_KEYS) from the config, so
                # that changing them reruns nothing.
                settings=EmbedSettings.from_config(
                    benchmark,
                    {**snakemake.config["embedding"], **identity["embedding"]},
                    threads=snakemake.threads,  # after --set-threads and the --cores cap
                    pixel_cache_dir=snakemake.params.pixel_cache_dir,
                ),
                sources={"image": Path(images[number]), "text": Path(texts[number])},
                outputs={
                    modality: MatrixFiles(
                        named[modality], named[f"{modality}_ids"], named[f"{modality}_provenance"]
                    )
                    for modality in ("image", "text")
                },
                resume_dir=Path(EMBEDDING_SHARDS.format(model=model, benchmark=benchmark)),
            )
    for (model, benchmark), records in run_models(jobs).items():
        for modality, shards in records.items():
            reused = sum(record["reused"] for record in shards)
            log.info(
                "%s on %s %s: %d shard(s), %d reused",
                model,
                benchmark,
                modality,
                len(shards),
                reused,
            )
