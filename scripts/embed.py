"""Rule embed: every shard of both modalities through one loaded model, for one benchmark or,
with embedding.jobs: per_model, for each of the config's benchmarks in turn."""

from pathlib import Path

from vlbench.embedding.job import EmbeddingJob, run_benchmarks
from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_files import MatrixFiles
from vlbench.paths import EMBEDDING_FILES
from vlbench.rule_log import rule_log


def files_of(value) -> list[str]:
    """A named input as a list (one benchmark's job names one file)."""
    return [value] if isinstance(value, str) else list(value)


with rule_log(snakemake.log[0]) as log:
    identity = dict(snakemake.params.identity)
    benchmarks = list(snakemake.params.benchmarks)
    images, texts = files_of(snakemake.input.images), files_of(snakemake.input.texts)
    files = list(snakemake.output)  # EMBEDDING_FILES per benchmark, in the benchmarks' order
    jobs = {}
    for number, benchmark in enumerate(benchmarks):
        named = dict(zip(EMBEDDING_FILES, files[6 * number : 6 * number + 6], strict=True))
        jobs[benchmark] = EmbeddingJob(
            model=dict(snakemake.params.model),
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
                    Path(named[modality]),
                    Path(named[f"{modality}_ids"]),
                    Path(named[f"{modality}_provenance"]),
                )
                for modality in ("image", "text")
            },
            resume_dir=Path(snakemake.params.resume_dirs[number]),
        )
    for benchmark, records in run_benchmarks(jobs).items():
        for modality, shards in records.items():
            reused = sum(record["reused"] for record in shards)
            log.info("%s %s: %d shard(s), %d reused", benchmark, modality, len(shards), reused)
