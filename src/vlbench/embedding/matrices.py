"""Embedding matrices: read them back, describe what made them, and embed a modality by shards.

The engine lives in small modules: `embed_loader` (row-group streaming through a DataLoader),
`image_transform` (geometric vs per-model steps), `pixel_cache` (decode once per geometry) and
`embed_shards` (one shard, the shard plan, the gather). Workflow rules run one shard per job;
`embed_modality_sharded` runs them in one process with the same files and resume behaviour.
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
from vlbench.embedding.shard_files import gather_shards, shard_name, shard_ranges
from vlbench.embedding.shards import EmbedSettings, embed_shard
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
    """Embed every shard missing under `out_dir/<modality>/`, then gather `<modality>.npy`.

    Same files as the workflow writes; shards already complete are not recomputed.
    """
    rows = pq.ParquetFile(source).metadata.num_rows
    record = model_record(model_spec, model, settings.batch_size)
    shard_dir = Path(out_dir) / modality
    paths = []
    for index, (start, stop) in enumerate(shard_ranges(rows, shard_size)):
        stem = shard_dir / shard_name(index)
        npy, ids, prov = (stem.with_suffix(s) for s in (".npy", ".ids.parquet", ".json"))
        if not (npy.is_file() and ids.is_file() and prov.is_file()):
            embed_shard(model, record, modality, source, start, stop, settings, npy, ids, prov)
        paths.append((npy, ids, prov))
    out = Path(out_dir) / f"{modality}.npy"
    gather_shards(
        [p[0] for p in paths],
        [p[1] for p in paths],
        [p[2] for p in paths],
        out,
        Path(out_dir) / f"{modality}.ids.parquet",
        Path(out_dir) / f"{modality}.json",
    )
    return out
