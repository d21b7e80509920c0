"""A model loaded for an embed job, with what the job asks of it worked out once: its
provenance record, its image pipeline (`ImagePipeline.from_model`) and its pass key."""

from __future__ import annotations

import functools
import logging
import os
import platform
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vlbench.embedding.gpu_slots import GpuClaim, claim_gpu
from vlbench.embedding.image_transform import ImagePipeline
from vlbench.embedding.models import EmbeddingModel, load_model, model_provenance
from vlbench.embedding.settings import EmbedSettings
from vlbench.errors import VlbenchError
from vlbench.hashing import weights_sha256

log = logging.getLogger("vlbench")

# What an image pass depends on besides the shard: models with equal keys see the same batches
# of the same pixels, so one pass over a shard serves them all.
PassKey = tuple[Any, ...]


@dataclass(frozen=True)
class LoadedModel:
    """A loaded model, its provenance record, its image pipeline and its pass key (None: its
    images go through a pass of their own)."""

    key: str
    model: EmbeddingModel
    record: dict[str, Any]
    pipeline: ImagePipeline
    pass_key: PassKey | None

    @classmethod
    def of(
        cls, model: EmbeddingModel, record: dict[str, Any], settings: EmbedSettings, key: str = ""
    ) -> LoadedModel:
        """A model loaded already, with its pipeline and pass key under `settings`."""
        pipeline = ImagePipeline.from_model(model)
        passes = pass_key(pipeline, settings, model.device.type)
        return cls(key or str(record.get("model", {}).get("name")), model, record, pipeline, passes)


def pass_key(pipeline: ImagePipeline, settings: EmbedSettings, device_type: str) -> PassKey | None:
    """The pass key of a pipeline on a device (None when its preprocess does not split into a
    cacheable geometry, or the pixel cache is off)."""
    if not (settings.pixel_cache and pipeline.cacheable):
        return None
    return (
        pipeline.geometry_key(settings.draft_decode),
        settings.batch_size,
        settings.decode_workers,
        settings.draft_decode,
        device_type,
    )


def load(
    key: str,
    spec: Mapping[str, Any],
    identity: Mapping[str, Any],
    settings: EmbedSettings,
    imports: threading.Thread | None = None,
) -> LoadedModel:
    """Load a model of the job (config key `key`) on a GPU of its own when there is one;
    `imports`: the adapters' modules being imported ahead, joined first."""
    if imports is not None:
        imports.join()
    # Locally Snakemake sets no CUDA_VISIBLE_DEVICES: lock a GPU of our own first.
    log.info(claimed_gpu().describe())
    try:
        model = load_model(spec)
    except VlbenchError as error:  # named by the config key the user wrote
        raise VlbenchError(f"models.{key}: {error}") from None
    log.info(
        "model %s on %s (CUDA_VISIBLE_DEVICES=%s)",
        spec["name"],
        model.device,
        os.environ.get("CUDA_VISIBLE_DEVICES"),
    )
    record = model_record(spec, model, settings.batch_size)
    record["model_files_fingerprint"] = identity.get("model_files")
    return LoadedModel.of(model, record, settings, key)


@functools.cache
def claimed_gpu() -> GpuClaim:
    """This process's GPU, claimed once (`claim_gpu`) before anything touches CUDA."""
    return claim_gpu()


def model_record(
    model_spec: Mapping[str, Any], model: EmbeddingModel, batch_size: int | None = None
) -> dict[str, Any]:
    """What produced an embedding: spec, weights, libraries, device, precision, host."""
    pretrained = model_spec.get("pretrained")
    weights = weights_sha256(pretrained) if pretrained and Path(pretrained).is_file() else None
    return {
        **model_provenance(model, batch_size),
        "model": model_spec,
        "weights_sha256": weights,
        "device_name": torch.cuda.get_device_name(model.device)
        if model.device.type == "cuda"
        else platform.processor() or platform.machine(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "host": platform.node(),
    }
