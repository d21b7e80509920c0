"""Rule embed: every shard of both modalities through one loaded model, for each (model,
benchmark) of the job (embedding.jobs: one pair, one model on every benchmark, or all); writes
each pair's list of stored shards, which the pair's gather job reads. The job is planned first
(vlbench.embedding.plan, no torch); a plan with nothing left to embed writes the lists without
importing torch or loading a model."""

from pathlib import Path

from vlbench.embedding.plan import EmbedJob, Pair, plan_job
from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_list import write_lists
from vlbench.paths import EMBEDDING_SHARD_LIST, EMBEDDING_SHARDS, PIXEL_CACHE_FOLDER
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    benchmarks = list(snakemake.params.benchmarks)
    images, texts = list(snakemake.input.images), list(snakemake.input.texts)
    outputs = set(snakemake.output)
    models = snakemake.params.models
    pairs = {}
    for model, given in models.items():
        for number, benchmark in enumerate(benchmarks):
            shard_list = EMBEDDING_SHARD_LIST.format(model=model, benchmark=benchmark)
            assert shard_list in outputs, f"{shard_list} is not an output of this job"
            pairs[model, benchmark] = Pair(
                spec=dict(given["spec"]),
                identity=dict(given["identity"]),
                sources={"image": Path(images[number]), "text": Path(texts[number])},
                resume_dir=Path(EMBEDDING_SHARDS.format(model=model, benchmark=benchmark)),
                shard_list=Path(shard_list),
                pixel_folder=Path(PIXEL_CACHE_FOLDER.format(benchmark=benchmark)),
            )
    # Result settings from the params, speed knobs from the config (vlbench.embedding.identity).
    settings = EmbedSettings.for_job(models, snakemake.config["embedding"], snakemake.threads)
    log.info(
        "embed job (embedding.jobs: %s): %d model(s) x %d benchmark(s)",
        snakemake.config["embedding"]["jobs"],
        len(models),
        len(benchmarks),
    )
    plan = plan_job(EmbedJob(settings, pairs))
    if not plan.models:  # every shard stored: no model to load
        records = write_lists(plan.pairs)
    else:  # a shard to embed: torch and the models' modules import only now
        from vlbench.embedding.job import run_plan

        records = run_plan(plan)
    for (model, benchmark), modalities in records.items():
        for modality, shards in modalities.items():
            reused = sum(record["reused"] for record in shards)
            log.info(
                "%s on %s %s: %d shard(s), %d reused",
                model,
                benchmark,
                modality,
                len(shards),
                reused,
            )
