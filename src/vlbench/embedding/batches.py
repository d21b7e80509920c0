"""Model-ready image batches of one shard: from the pixel cache, or decoded (filling the cache).

Batches hold exactly `batch_size` rows (the last one fewer) whether pixels come from the cache or
from a decode, so the forward passes, and their numbers, are the same either way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable, Iterator
from typing import Any

import numpy as np
import torch

from vlbench.data.decode_policy import DecodePolicy, read_policy
from vlbench.embedding.image_transform import ImagePipeline
from vlbench.embedding.loader import (
    PREFETCH_BATCHES,
    ImageChunks,
    decode_chunk_rows,
    plan_chunks,
    stream_image_chunks,
)
from vlbench.embedding.pixel_cache import PixelCache, PixelShardWriter
from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_files import Shard

# One batch of a shard's images: ("pixels", uint8 N x H x W x 3) or ("inputs", float32 inputs).
Batch = tuple[str, torch.Tensor]


def model_inputs(pipeline: ImagePipeline, batches: Iterable[Batch]) -> Iterator[torch.Tensor]:
    """Float32 model inputs of a pass's batches, through `pipeline`'s tensor steps."""
    inputs = None  # one float32 buffer for every batch: each is consumed before the next
    for kind, batch in batches:
        if kind == "inputs":
            yield batch
            continue
        inputs = pipeline.to_model_input(batch, reuse=inputs)
        yield inputs


class PixelPass:
    """One pass over a shard's images, batch by batch: ("pixels", uint8 N x H x W x 3) after
    `pipeline`'s geometric steps, or ("inputs", float32 model inputs) when its preprocess cannot
    be split (then every step ran in the decode). `stats` says where they come from; `pin`: pin
    the decoded batches' memory (for a GPU).

    The pass opens when made: a pixel-cache hit is mapped, a miss takes the shard's fill lock
    (if another job is decoding the same rows, this one waits and then reads them from the
    cache) and starts the decode workers, which decode ahead while the caller does other work
    before iterating. Iterate once; `close` (or the end of a `with` block) lets go of the lock
    and the workers whether or not every batch was taken.
    """

    def __init__(
        self, pipeline: ImagePipeline, shard: Shard, settings: EmbedSettings, pin: bool = False
    ) -> None:
        policy = read_policy(shard.source)  # read once for the cache and the decode
        self.stats: dict[str, Any] = {
            "pixel_geometry": pipeline.summary,
            "decode_policy": policy.as_dict(),
        }
        self._lock: contextlib.ExitStack | None = None
        self._decode: _Decode | None = None
        self._cached: np.ndarray | None = None
        self._batch_size = settings.batch_size
        off = cache_off_reason(settings, pipeline, shard)
        if off is not None:
            self.stats["pixel_cache"] = off
            self._decode = _Decode(pipeline, shard, settings, pin, None, policy)
            return
        assert shard.pixel_folder is not None  # cache_off_reason says so
        key = pipeline.geometry_key(settings.draft_decode)
        self.stats["geometry_key"] = key
        cache = PixelCache(shard.pixel_folder, key, shard.source, shard.digest, policy)
        where = cache.shard_path(shard.start, shard.stop)
        self._cached = cache.load(shard.start, shard.stop)
        if self._cached is not None:
            self.stats["pixel_cache"] = f"hit: {where}"
            return
        self._lock = contextlib.ExitStack()
        try:
            waited = self._lock.enter_context(cache.filling(shard.start, shard.stop))
            self._cached = cache.load(shard.start, shard.stop)
            if self._cached is not None:
                self.stats["pixel_cache"] = (
                    f"hit after waiting {waited:.1f} s for another job: {where}"
                )
                self.close()
                return
            self.stats["pixel_cache"] = f"miss: wrote {where}"
            self._decode = _Decode(pipeline, shard, settings, pin, cache, policy)
        except BaseException:
            self.close()
            raise

    def __iter__(self) -> Iterator[Batch]:
        try:
            if self._cached is not None:
                pixels = self._cached
                for begin in range(0, len(pixels), self._batch_size):
                    batch = np.array(pixels[begin : begin + self._batch_size])
                    yield "pixels", torch.from_numpy(batch)
            elif self._decode is not None:
                yield from self._decode.batches()
        finally:
            self.close()

    def adopt(self, pipeline: ImagePipeline) -> None:
        """Record `pipeline`, whose geometry is this pass's, as the pass's own: a pass opened on
        a predicted geometry then notes the loaded model's summary (its normalisation too) in
        its stats and the cache's description, as a pass opened for that model would."""
        self.stats["pixel_geometry"] = pipeline.summary
        if self._decode is not None:
            self._decode.pipeline = pipeline

    def close(self) -> None:
        """Stop the decode workers (a partly filled cache shard is discarded) and let go of
        the fill lock; idempotent."""
        if self._decode is not None:
            self._decode.finish()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> PixelPass:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def cache_off_reason(settings: EmbedSettings, pipeline: ImagePipeline, shard: Shard) -> str | None:
    """Why a shard's pixels are not cached (the pass's `pixel_cache` note), or None."""
    if not settings.pixel_cache:
        return "off"
    if not pipeline.cacheable:
        return f"off: {pipeline.reason}"
    if shard.pixel_folder is None:
        return "off: no pixel-cache folder given"
    return None


class _Decode:
    """Decoding a shard's rows through the DataLoader, optionally filling a pixel-cache shard;
    the workers start when it is made."""

    def __init__(
        self,
        pipeline: ImagePipeline,
        shard: Shard,
        settings: EmbedSettings,
        pin: bool,
        cache: PixelCache | None,
        policy: DecodePolicy,
    ) -> None:
        self.pipeline = pipeline
        self.settings = settings
        self.cache = cache
        rows = decode_chunk_rows(settings.batch_size, settings.decode_workers)
        dataset = ImageChunks(
            shard.source,
            plan_chunks(shard.source, shard.start, shard.stop, rows),
            pipeline,
            draft=settings.draft_decode,
            policy=policy,
        )
        # As many rows decoded ahead per worker as with whole batches per chunk.
        prefetch = PREFETCH_BATCHES * -(-settings.batch_size // rows)
        self.chunks: Generator[dict[str, Any], None, None] | None = stream_image_chunks(
            dataset, settings.decode_workers, pin, prefetch
        )
        self.writer = PixelShardWriter(cache, shard.start, shard.stop) if cache else None
        self.success = False

    def batches(self) -> Iterator[Batch]:
        """The shard's rows as `PixelPass` gives them; with a cache, the pixels are written
        there too (and published by `finish` once every row is in)."""
        assert self.chunks is not None, "a decode is iterated once"
        for item in rebatch(self.chunks, self.settings.batch_size):
            if "inputs" in item:
                yield "inputs", item["inputs"]
                continue
            if self.writer is not None:
                self.writer.append(item["pixels"].numpy())
            yield "pixels", item["pixels"]
        self.success = True

    def finish(self) -> None:
        """Stop the decode workers now, not when the garbage collector gets to them (they hold
        the cache's lock file open), and publish the cache shard if it is complete."""
        if self.chunks is None:
            return
        self.chunks.close()
        self.chunks = None
        if self.writer is not None and self.cache is not None and self.writer.close(self.success):
            self.cache.describe(
                {
                    **self.pipeline.summary,
                    "steps": self.pipeline.geometry,
                    "draft_decode": self.settings.draft_decode,
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
