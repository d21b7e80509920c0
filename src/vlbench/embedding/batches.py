"""Model-ready image batches of one shard: from the pixel cache, or decoded (filling the cache).

Batches hold exactly `batch_size` rows (the last one fewer) whether pixels come from the cache or
from a decode, so the forward passes, and their numbers, are the same either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from vlbench.data.decode_policy import read_policy
from vlbench.embedding.image_transform import ImagePipeline
from vlbench.embedding.loader import ImageChunks, plan_chunks, stream_image_chunks
from vlbench.embedding.models import EmbeddingModel
from vlbench.embedding.pixel_cache import PixelCache, PixelShardWriter
from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_files import Shard

# One batch of a shard's images: ("pixels", uint8 N x H x W x 3) or ("inputs", float32 inputs).
Batch = tuple[str, torch.Tensor]


def image_batches(
    model: EmbeddingModel, shard: Shard, settings: EmbedSettings, stats: dict[str, Any]
) -> Iterator[torch.Tensor]:
    """The shard's images as float32 model inputs, batch by batch; `stats` says where from."""
    pipeline = ImagePipeline.from_model(model)
    pin = model.device.type == "cuda"
    yield from model_inputs(pipeline, pixel_batches(pipeline, shard, settings, stats, pin))


def model_inputs(pipeline: ImagePipeline, batches: Iterator[Batch]) -> Iterator[torch.Tensor]:
    """Float32 model inputs of `pixel_batches`' batches, through `pipeline`'s tensor steps."""
    inputs = None  # one float32 buffer for every batch: each is consumed before the next
    for kind, batch in batches:
        if kind == "inputs":
            yield batch
            continue
        inputs = pipeline.to_model_input(batch, reuse=inputs)
        yield inputs


def pixel_batches(
    pipeline: ImagePipeline,
    shard: Shard,
    settings: EmbedSettings,
    stats: dict[str, Any],
    pin: bool = False,
) -> Iterator[Batch]:
    """The shard's images batch by batch: ("pixels", uint8 N x H x W x 3) after `pipeline`'s
    geometric steps, or ("inputs", float32 model inputs) when its preprocess cannot be split
    (then every step ran in the decode). `stats` says where they came from; `pin`: pin the
    decoded batches' memory (for a GPU).

    On a cache miss the job takes the shard's fill lock first: if another job is decoding the
    same rows, this one waits and reads them from the cache instead of decoding them again.
    """
    stats["pixel_geometry"] = pipeline.summary
    stats["decode_policy"] = read_policy(shard.source).as_dict()
    decode = _Decode(pipeline, shard, settings, pin)
    if not (settings.pixel_cache and pipeline.cacheable):
        stats["pixel_cache"] = f"off: {pipeline.reason}" if settings.pixel_cache else "off"
        yield from decode.batches(None)
        return
    key = pipeline.geometry_key(settings.draft_decode)
    stats["geometry_key"] = key
    cache = PixelCache(
        settings.pixel_cache_dir, settings.benchmark, key, shard.source, shard.digest
    )
    where = cache.shard_path(shard.start, shard.stop)
    cached = cache.load(shard.start, shard.stop)
    if cached is not None:
        stats["pixel_cache"] = f"hit: {where}"
        yield from _cached_batches(cached, settings.batch_size)
        return
    with cache.filling(shard.start, shard.stop) as waited:
        cached = cache.load(shard.start, shard.stop)
        if cached is not None:
            stats["pixel_cache"] = f"hit after waiting {waited:.1f} s for another job: {where}"
            yield from _cached_batches(cached, settings.batch_size)
            return
        stats["pixel_cache"] = f"miss: wrote {where}"
        yield from decode.batches(cache)


def _cached_batches(pixels: np.ndarray, batch_size: int) -> Iterator[Batch]:
    for begin in range(0, len(pixels), batch_size):
        yield "pixels", torch.from_numpy(np.array(pixels[begin : begin + batch_size]))


class _Decode:
    """Decoding a shard's rows through the DataLoader, optionally filling a pixel-cache shard."""

    def __init__(
        self, pipeline: ImagePipeline, shard: Shard, settings: EmbedSettings, pin: bool
    ) -> None:
        self.pipeline = pipeline
        self.shard = shard
        self.settings = settings
        self.pin = pin

    def batches(self, cache: PixelCache | None) -> Iterator[Batch]:
        """The shard's rows as `pixel_batches` gives them; with `cache`, the pixels are
        written there too."""
        shard, settings, pipeline = self.shard, self.settings, self.pipeline
        dataset = ImageChunks(
            shard.source,
            plan_chunks(shard.source, shard.start, shard.stop, settings.batch_size),
            pipeline,
            draft=settings.draft_decode,
        )
        chunks = stream_image_chunks(dataset, settings.decode_workers, self.pin)
        writer = PixelShardWriter(cache, shard.start, shard.stop) if cache is not None else None
        success = False
        try:
            for item in rebatch(chunks, settings.batch_size):
                if "inputs" in item:
                    yield "inputs", item["inputs"]
                    continue
                if writer is not None:
                    writer.append(item["pixels"].numpy())
                yield "pixels", item["pixels"]
            success = True
        finally:
            # Stop the decode workers now, not when the garbage collector gets to them: they
            # hold the cache's lock file open (a traceback keeps this frame's locals alive).
            chunks.close()
            if writer is not None and cache is not None and writer.close(success):
                cache.describe(
                    {
                        "benchmark": settings.benchmark,
                        **pipeline.summary,
                        "steps": pipeline.geometry,
                        "draft_decode": settings.draft_decode,
                    }
                )


def rebatch(items: Iterator[dict[str, Any]], batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
    """Regroup row-group-aligned chunks into batches of exactly `batch_size` rows (last: fewer).

    Forward passes then see the same batches whether pixels come from the cache or a decode.
    """
    pending: list[torch.Tensor] = []
    held = 0
    key = "pixels"
    for item in items:
        key = "inputs" if "inputs" in item else "pixels"
        pending.append(item[key])
        held += len(item[key])
        while held >= batch_size:
            merged = torch.cat(pending) if len(pending) > 1 else pending[0]
            yield {key: merged[:batch_size]}
            rest = merged[batch_size:]
            pending, held = ([rest], len(rest)) if len(rest) else ([], 0)
    if held:
        yield {key: torch.cat(pending) if len(pending) > 1 else pending[0]}
