"""The models of an embed job, loaded in waves, and the image pass opened ahead of each wave.

A wave takes the plan's models in order, loading each (and handing it to the caller, which
embeds its texts) until they hold about `MODEL_MEMORY_SHARE` of the device's memory; the caller
then embeds the wave's image shards, one pass per shard for every model of the wave that shares
its geometry, and the wave is let go before the next. While a wave loads, the pass of its first
image shard is decoding already (`AheadPass`): the job's first pass opens even before the
adapters' modules import, on the geometry the first model's architecture file predicts, and is
kept only if the loaded model's pass key confirms it.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from vlbench.embedding.batches import PixelPass
from vlbench.embedding.loaded_model import LoadedModel, PassKey, claimed_gpu, load, pass_key
from vlbench.embedding.models import EmbeddingModel, import_adapters_ahead
from vlbench.embedding.models.open_clip_geometry import predicted_size, square_pipeline
from vlbench.embedding.plan import JobPlan
from vlbench.embedding.shard_files import Shard

log = logging.getLogger("vlbench")

# The share of the device's memory the models of one wave may hold.
MODEL_MEMORY_SHARE = 0.25
# Memory limits of the job's control group (v2, v1), where they exist ("max" fails to parse).
CGROUP_MEMORY_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


@dataclass
class Wave:
    """Loaded models (by config key) whose image shards the caller embeds together, and the
    pass opened ahead for the first of them (None: none)."""

    models: dict[str, LoadedModel]
    ahead: AheadPass | None


def waves(plan: JobPlan, loaded: Callable[[LoadedModel], None]) -> Iterator[Wave]:
    """Load the models the plan needs, in order, calling `loaded` with each (its texts embed
    while the wave's first image pass decodes), and yield them in waves. After each wave its
    models are let go and the device's memory given back; every pass opened ahead is closed
    and the adapters' import thread joined when the iteration ends, however it ends."""
    keys = plan.models_to_load()
    if not keys:
        return
    ahead = AheadPass.predicted(plan, keys[0])
    imports = import_adapters_ahead(plan.spec(key).spec for key in keys)
    wave: dict[str, LoadedModel] = {}
    held = 0
    try:
        for key in keys:
            torch.set_num_threads(plan.settings.threads)
            pair = plan.spec(key)
            model = load(key, pair.spec, pair.identity, plan.settings, imports)
            wave[key] = model
            ahead = ahead.confirmed(plan, model) if ahead else AheadPass.open(plan, model)
            loaded(model)
            held += model_bytes(model.model)
            if held >= memory_budget(model.model.device) or key == keys[-1]:
                yield Wave(wave, ahead)
                if ahead is not None:
                    ahead.pixels.close()
                wave.clear()  # the caller's wave holds this dict: its models go with it
                wave, held, ahead = {}, 0, None
                release_accelerator_memory()
    finally:
        if ahead is not None:
            ahead.pixels.close()
        imports.join()


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
    def open(cls, plan: JobPlan, model: LoadedModel) -> AheadPass | None:
        """The pass of the model's first image shard left to embed, or None when there is
        none or its pixels cannot be shared."""
        shard = _first_image_left(plan, model.key)
        if shard is None or model.pass_key is None:
            return None
        pin = model.model.device.type == "cuda"
        return cls(shard, model.pass_key, PixelPass(model.pipeline, shard, plan.settings, pin))

    @classmethod
    def predicted(cls, plan: JobPlan, key: str) -> AheadPass | None:
        """The pass `open` would give model `key`, opened before it loads on the geometry its
        spec predicts (`predicted_size`), or None when nothing is predicted."""
        size = predicted_size(plan.spec(key).spec) if plan.settings.pixel_cache else None
        shard = _first_image_left(plan, key) if size is not None else None
        if shard is None or size is None:
            return None
        pipeline = square_pipeline(size)
        # The job's GPU is claimed first: pinning the pass's batches initialises CUDA, after
        # which narrowing CUDA_VISIBLE_DEVICES has no effect (vlbench.embedding.gpu_slots).
        log.info(claimed_gpu().describe())
        device_type = "cuda" if torch.cuda.device_count() > 0 else "cpu"  # as load_model picks
        passes = pass_key(pipeline, plan.settings, device_type)
        if passes is None:
            return None
        pixels = PixelPass(pipeline, shard, plan.settings, device_type == "cuda")
        log.info("image pass opened on the predicted geometry %s", pipeline.summary)
        return cls(shard, passes, pixels, predicted_only=True)

    def confirmed(self, plan: JobPlan, model: LoadedModel) -> AheadPass | None:
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
        return AheadPass.open(plan, model)

    def take(self, shard: Shard, key: PassKey | None) -> PixelPass | None:
        """The opened pass if it is the one asked for (once), else None."""
        if (shard, key) != (self.shard, self.key):
            return None
        self.key = ()  # taken
        return self.pixels


def _first_image_left(plan: JobPlan, model: str) -> Shard | None:
    """The first image shard a model's pairs leave to embed."""
    for pair in plan.pairs_of(model).values():
        missing = pair.missing("image")
        if missing:
            return missing[0]
    return None


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
