"""The embed_shard rule's work: shard k of every modality of a benchmark through one model load.

`run` takes a plain-data job description (`payload`, built from Snakemake's job by
`scripts/embed.py`), so that the same job runs in the rule's own process or in a warm worker
(`vlbench.warm.client`) that has torch and the model libraries imported already.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from vlbench.embedding.gpu_slots import claim_gpu
from vlbench.embedding.matrices import EmbedSettings, model_record
from vlbench.embedding.models import load_model
from vlbench.embedding.shard_files import read_shard_plan
from vlbench.embedding.shards import ShardWork, embed_shard_job
from vlbench.rule_log import rule_log


def run(payload: dict[str, Any]) -> None:
    """Embed the shard described by `payload`, logging to its rule log (see `scripts/embed.py`)."""
    with rule_log(payload["log"]) as log:
        # Same intra-op threads in the rule's process and in a warm worker's child.
        torch.set_num_threads(payload["threads"])
        spec = payload["model"]
        identity = payload["identity"]
        settings = EmbedSettings.from_config(
            payload["benchmark"],
            payload["embedding"],
            pixel_cache_dir=payload["pixel_cache_dir"],
            threads=payload["threads"],
        )
        work = []
        for modality, item in payload["work"].items():
            start, stop = read_shard_plan(item["plan"])["shards"][payload["shard"]]
            work.append(ShardWork(modality, Path(item["data"]), start, stop, item["digest"]))

        def load() -> tuple[Any, dict[str, Any]]:
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
            return model, {**record, "model_files_fingerprint": identity["model_files"]}

        job = embed_shard_job(
            load, work, settings, identity, Path(payload["embeddings_dir"]), Path(payload["record"])
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
