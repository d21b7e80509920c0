"""Rule embed_shard: one shard (a row range) of one modality of one benchmark through one model."""

import os
from pathlib import Path

from vlbench.embedding.gpu_slots import claim_gpu
from vlbench.embedding.matrices import EmbedSettings, model_record
from vlbench.embedding.models import load_model
from vlbench.embedding.shard_files import read_shard_plan
from vlbench.embedding.shards import embed_shard
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    # Locally Snakemake sets no CUDA_VISIBLE_DEVICES: lock a GPU of our own before CUDA starts.
    log.info(claim_gpu().describe())
    spec = dict(snakemake.params.model)
    model = load_model(spec)
    log.info(
        "model %s on %s (CUDA_VISIBLE_DEVICES=%s)",
        spec["name"],
        model.device,
        os.environ.get("CUDA_VISIBLE_DEVICES"),
    )
    start, stop = read_shard_plan(snakemake.input.plan)["shards"][snakemake.wildcards.shard]
    # Result keys come as params; speed knobs (RUN_TIME_KEYS) from the config, so that
    # changing them reruns nothing.
    settings = EmbedSettings.from_config(
        snakemake.wildcards.benchmark,
        {**snakemake.config["embedding"], **snakemake.params.embedding},
        pixel_cache_dir=snakemake.params.pixel_cache_dir,
        rows_digest=snakemake.params.content,
        threads=snakemake.threads,  # after --set-threads and the --cores cap
    )
    record = embed_shard(
        model,
        {
            **model_record(spec, model, settings.batch_size),
            "model_files_fingerprint": snakemake.params.model_files,
        },
        snakemake.wildcards.modality,
        Path(snakemake.input.data),
        start,
        stop,
        settings,
        Path(snakemake.output.embeddings),
        Path(snakemake.output.ids),
        Path(snakemake.output.provenance),
    )
    log.info(
        "rows %d-%d: %s items/s, pixel cache %s",
        start,
        stop,
        record["items_per_second"],
        record.get("pixel_cache", "n/a"),
    )
    if record.get("texts_at_context_limit"):
        log.warning(
            "%d texts fill the whole context of %s tokens: longer ones were truncated",
            record["texts_at_context_limit"],
            model.context_length,
        )
