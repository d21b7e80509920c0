"""Rule embed: every shard of both modalities through one loaded model, for each (model,
benchmark) of the job (embedding.jobs: one pair, one model on every benchmark, or all); writes
each pair's list of stored shards, which the pair's gather job reads. A job whose every shard is
stored already (it runs again because its set of pairs changed) imports no torch and loads no
model (vlbench.embedding.pairs)."""

from pathlib import Path

from vlbench.embedding.pairs import EmbeddingJob, stored_records
from vlbench.embedding.settings import EmbedSettings
from vlbench.paths import EMBEDDING_SHARD_LIST, EMBEDDING_SHARDS, PIXEL_CACHE_FOLDER
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    benchmarks = list(snakemake.params.benchmarks)
    images, texts = list(snakemake.input.images), list(snakemake.input.texts)
    outputs = set(snakemake.output)
    jobs = {}
    for model, given in snakemake.params.models.items():
        identity = dict(given["identity"])
        for number, benchmark in enumerate(benchmarks):
            shard_list = EMBEDDING_SHARD_LIST.format(model=model, benchmark=benchmark)
            assert shard_list in outputs, f"{shard_list} is not an output of this job"
            jobs[model, benchmark] = EmbeddingJob(
                model=dict(given["spec"]),
                identity=identity,
                # Result keys come as params; speed knobs (RUN_TIME_KEYS) from the config, so
                # that changing them reruns nothing.
                settings=EmbedSettings.from_config(
                    {**snakemake.config["embedding"], **identity["embedding"]},
                    threads=snakemake.threads,  # after --set-threads and the --cores cap
                ),
                sources={"image": Path(images[number]), "text": Path(texts[number])},
                resume_dir=Path(EMBEDDING_SHARDS.format(model=model, benchmark=benchmark)),
                shard_list=Path(shard_list),
                pixel_folder=Path(PIXEL_CACHE_FOLDER.format(benchmark=benchmark)),
            )
    log.info(
        "embed job (embedding.jobs: %s): %d model(s) x %d benchmark(s)",
        snakemake.config["embedding"]["jobs"],
        len(snakemake.params.models),
        len(benchmarks),
    )
    results = stored_records(jobs)
    if results is None:  # a shard to embed: torch and the models' modules import only now
        from vlbench.embedding.job import run_models

        results = run_models(jobs)
    for (model, benchmark), records in results.items():
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
