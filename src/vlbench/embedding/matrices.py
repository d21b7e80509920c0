"""Embedding matrices: read them back, describe what made them, and embed a modality by shards.

The engine lives in small modules: `embed_loader` (row-group streaming through a DataLoader),
`image_transform` (geometric vs per-model steps), `pixel_cache` (decode once per geometry) and
`shards` (embed shards, reuse stored ones) and `shard_files` (plan, files, gather). Workflow jobs
embed shard k of every modality; `embed_modality_sharded` embeds one modality's shards in one
process with the same files and resume behaviour.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import torch

from vlbench.embedding.loader import decode_image
from vlbench.embedding.models import EmbeddingModel, model_provenance
from vlbench.embedding.shard_files import (
    gather_shards,
    shard_digests,
    shard_name,
    shard_ranges,
    stored_shards,
)
from vlbench.embedding.shards import EmbedSettings, ShardWork, embed_shard_job, result_settings
from vlbench.hashing import weights_sha256

__all__ = [
    "EmbedSettings",
    "decode_image",
    "embed_modality_sharded",
    "model_record",
]


def model_record(
    model_spec: dict[str, Any], model: EmbeddingModel, batch_size: int | None = None
) -> dict[str, Any]:
    """What produced an embedding: spec, weights, libraries, device, precision, host."""
    pretrained = model_spec.get("pretrained")
    weights = weights_sha256(pretrained) if pretrained and Path(pretrained).is_file() else None
    record = model_provenance(model, batch_size)
    return {
        **record,
        "model": model_spec,
        "weights_sha256": weights,
        "device_name": torch.cuda.get_device_name(model.device)
        if model.device.type == "cuda"
        else platform.processor() or platform.machine(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "host": platform.node(),
    }


def embed_modality_sharded(
    model: EmbeddingModel,
    model_spec: dict[str, Any],
    modality: str,
    source: Path,
    settings: EmbedSettings,
    shard_size: int,
    out_dir: Path,
) -> Path:
    """Embed every shard of a modality not stored under `out_dir/<modality>/`, then gather
    `<modality>.npy`: the workflow's files and resume rule (content keys), in one process."""
    rows = pq.ParquetFile(source).metadata.num_rows
    ranges = shard_ranges(rows, shard_size)
    digests = dict(
        zip((shard_name(i) for i in range(len(ranges))), shard_digests(source, ranges), strict=True)
    )
    identity = {"model": model_spec, "embedding": result_settings(settings)}
    record = model_record(model_spec, model, settings.batch_size)
    for index, (start, stop) in enumerate(ranges):
        name = shard_name(index)
        embed_shard_job(
            lambda: (model, record),
            [ShardWork(modality, Path(source), start, stop, digests[name])],
            settings,
            identity,
            Path(out_dir),
            Path(out_dir) / "shards" / f"{name}.json",
        )
    shards = stored_shards(out_dir, modality, digests, identity)
    out = Path(out_dir) / f"{modality}.npy"
    gather_shards(
        [paths["embeddings"] for paths in shards],
        [paths["ids"] for paths in shards],
        [paths["provenance"] for paths in shards],
        out,
        Path(out_dir) / f"{modality}.ids.parquet",
        Path(out_dir) / f"{modality}.json",
    )
    return out
