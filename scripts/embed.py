"""Rule embed_shard: shard k of every modality of one benchmark through one loaded model."""

import os
from pathlib import Path

from vlbench.embedding.gpu_slots import claim_gpu
from vlbench.embedding.matrices import EmbedSettings, model_record
from vlbench.embedding.models import load_model
from vlbench.embedding.shard_files import read_shard_plan
from vlbench.embedding.shards import ShardWork, embed_shard_job
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    shard = snakemake.wildcards.shard
    spec = dict(snakemake.params.model)
    # Result keys come as params; speed knobs (RUN_TIME_KEYS) from the config, so that
    # changing them reruns nothing.
    settings = EmbedSettings.from_config(
        snakemake.wildcards.benchmark,
        {**snakemake.config["embedding"], **snakemake.params.identity["embedding"]},
        pixel_cache_dir=snakemake.params.pixel_cache_dir,
        threads=snakemake.threads,  # after --set-threads and the --cores cap
    )
    work = []
    for modality, digest in snakemake.params.content.items():
        plan = read_shard_plan(snakemake.input[f"{modality}_plan"])
        start, stop = plan["shards"][shard]
        source = Path(snakemake.input[f"{modality}_data"])
        work.append(ShardWork(modality, source, start, stop, digest))

    def load():
        """Claim a GPU and load the model (only when a shard needs embedding)."""
        # Locally Snakemake sets no CUDA_VISIBLE_DEVICES: lock a GPU of our own first.
        log.info(claim_gpu().describe())
        model = load_model(spec)
        log.info(
            "model %s on %s (CUDA_VISIBLE_DEVICES=%s)",
            spec["name"],
            model.device,
            os.environ.get("CUDA_VISIBLE_DEVICES"),
        )
        record = model_record(spec, model, settings.batch_size)
        return model, {
            **record,
            "model_files_fingerprint": snakemake.params.identity["model_files"],
        }

    job = embed_shard_job(
        load,
        work,
        settings,
        dict(snakemake.params.identity),
        Path(snakemake.params.embeddings_dir),
        Path(snakemake.output.record),
    )
    for modality, done in job["modalities"].items():
        record = done["provenance"]
        if done["reused"]:
            log.info("%s rows %d-%d: stored shard reused", modality, *done["rows"])
            continue
        log.info(
            "%s rows %d-%d: %s items/s, pixel cache %s",
            modality,
            *done["rows"],
            record["items_per_second"],
            record.get("pixel_cache", "n/a"),
        )
        if record.get("texts_at_context_limit"):
            log.warning(
                "%d texts fill the whole context of %s tokens: longer ones were truncated",
                record["texts_at_context_limit"],
                record.get("context_length", "the model's"),
            )
