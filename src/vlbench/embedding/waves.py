"""The models of an embed job: each loaded once with what the job asks of it worked out once
(`LoadedModel`: its provenance record, image pipeline and pass key), in waves, with the image
pass opened ahead of each wave.

A wave takes the plan's models in order, as the job loads each one (and embeds its texts),
until they hold about `MODEL_MEMORY_SHARE` of the device's memory; the job then embeds the
wave's image shards, one pass per shard for every model of the wave that shares its geometry,
and lets the wave go before the next (`Waves`). While a wave loads, the pass of its first
image shard is decoding already (`AheadPass`): the job's first pass opens even before the
adapters' modules import, on the geometry the first model's architecture file predicts, and is
kept only if the loaded model's pass key confirms it.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import platform
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vlbench.embedding.batches import PixelPass
from vlbench.embedding.gpu_slots import GpuClaim, claim_gpu
from vlbench.embedding.image_transform import ImagePipeline
from vlbench.embedding.models import (
    EmbeddingModel,
    import_adapters_ahead,
    load_model,
    model_provenance,
)
from vlbench.embedding.models.open_clip_geometry import predicted_size, square_pipeline
from vlbench.embedding.plan import JobPlan, ModelWork
from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_files import Shard
from vlbench.errors import VlbenchError
from vlbench.hashing import weights_sha256

log = logging.getLogger("vlbench")

# The share of the device's memory the models of one wave may hold.
MODEL_MEMORY_SHARE = 0.25
# Memory limits of the job's control group (v2, v1), where they exist ("max" fails to parse).
CGROUP_MEMORY_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


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


class Waves:
    """The models of a plan, loaded in order into waves: iterating gives each model's work, the
    loaded model and whether the wave ends with it (its models then hold `MODEL_MEMORY_SHARE`
    of the device's memory, or it is the last); once the caller has embedded the wave's image
    shards and takes the next model, the wave is let go. A pass is opened ahead for each wave's
    first image shard (`ahead`); used as a context, every pass opened ahead is closed and the
    adapters' import thread joined on the way out, however the job ends."""

    def __init__(self, plan: JobPlan) -> None:
        self.plan = plan
        self.models: dict[str, LoadedModel] = {}
        self.ahead = AheadPass.predicted(plan.models[0], plan.settings) if plan.models else None
        self.imports = import_adapters_ahead(work.spec for work in plan.models)

    def __iter__(self) -> Iterator[tuple[ModelWork, LoadedModel, bool]]:
        settings, held = self.plan.settings, 0
        for work in self.plan.models:
            torch.set_num_threads(settings.threads)
            model = load(work.key, work.spec, work.identity, settings, self.imports)
            self.models[work.key] = model
            if self.ahead is None:
                self.ahead = AheadPass.open(work, model, settings)
            else:
                self.ahead = self.ahead.confirmed(work, model, settings)
            held += model_bytes(model.model)
            ends = held >= memory_budget(model.model.device) or work is self.plan.models[-1]
            yield work, model, ends
            if ends:  # let the wave go: close its pass opened ahead, give the memory back
                if self.ahead is not None:
                    self.ahead.pixels.close()
                self.models, held, self.ahead = {}, 0, None
                release_accelerator_memory()

    def __enter__(self) -> Waves:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.ahead is not None:
            self.ahead.pixels.close()
        self.imports.join()


@dataclass
class AheadPass:
    """An image pass opened before the models that take it are all loaded: the pass of the
    first image shard a wave's first model leaves to embed, decoding while the wave loads."""

    shard: Shard
    key: PassKey | tuple[()]
    pixels: PixelPass
    # Opened on a predicted geometry (`predicted`), not yet confirmed by the loaded model.
    predicted_only: bool = False

    @classmethod
    def open(cls, work: ModelWork, model: LoadedModel, settings: EmbedSettings) -> AheadPass | None:
        """The pass of the model's first image shard left to embed, or None when there is
        none or its pixels cannot be shared."""
        if work.first_image is None or model.pass_key is None:
            return None
        pin = model.model.device.type == "cuda"
        pixels = PixelPass(model.pipeline, work.first_image, settings, pin)
        return cls(work.first_image, model.pass_key, pixels)

    @classmethod
    def predicted(cls, work: ModelWork, settings: EmbedSettings) -> AheadPass | None:
        """The pass `open` would give the model, opened before it loads on the geometry its
        spec predicts (`predicted_size`), or None when nothing is predicted."""
        size = predicted_size(work.spec) if settings.pixel_cache else None
        if work.first_image is None or size is None:
            return None
        pipeline = square_pipeline(size)
        # The job's GPU is claimed first: pinning the pass's batches initialises CUDA, after
        # which narrowing CUDA_VISIBLE_DEVICES has no effect (vlbench.embedding.gpu_slots).
        log.info(claimed_gpu().describe())
        device_type = "cuda" if torch.cuda.device_count() > 0 else "cpu"  # as load_model picks
        passes = pass_key(pipeline, settings, device_type)
        if passes is None:
            return None
        pixels = PixelPass(pipeline, work.first_image, settings, device_type == "cuda")
        log.info("image pass opened on the predicted geometry %s", pipeline.summary)
        return cls(work.first_image, passes, pixels, predicted_only=True)

    def confirmed(
        self, work: ModelWork, model: LoadedModel, settings: EmbedSettings
    ) -> AheadPass | None:
        """This pass, once the loaded model's pass key equals the predicted one (the pass then
        records the model's own geometry summary); else it is closed and `open` gives the
        model's pass."""
        if not self.predicted_only:
            return self
        if model.pass_key == self.key:
            self.pixels.adopt(model.pipeline)
            self.predicted_only = False
            return self
        log.info("the loaded model's geometry differs from the predicted one: pass reopened")
        self.pixels.close()
        return AheadPass.open(work, model, settings)

    def take(self, shard: Shard, key: PassKey | None) -> PixelPass | None:
        """The opened pass if it is the one asked for (once), else None."""
        if (shard, key) != (self.shard, self.key):
            return None
        self.key = ()  # taken
        return self.pixels


def model_bytes(model: EmbeddingModel) -> int:
    """The bytes of a loaded model's parameters and buffers."""
    tensors = [*model.model.parameters(), *model.model.buffers()]
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors)


def memory_budget(device: torch.device) -> int:
    """`MODEL_MEMORY_SHARE` of the device's memory: the GPU's, or this machine's (capped by the
    job's cgroup limit, as on a cluster node)."""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
    else:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        for limit in CGROUP_MEMORY_LIMITS:
            with contextlib.suppress(OSError, ValueError):
                total = min(total, int(Path(limit).read_text().strip()))
    return int(total * MODEL_MEMORY_SHARE)


def release_accelerator_memory() -> None:
    """Give the memory of a model let go back to the device, before the next model loads."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
