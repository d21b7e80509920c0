"""On-disk cache of decoded, resized and cropped images: uint8 shards shared by every model.

One directory per (benchmark, geometric transform, decode policy, prepared source file); one file
per row range: ``<root>/<benchmark>/<geometry key>[-<decode policy>]-<source fingerprint>/``
``rows-<start>-<stop>-<digest>.npy`` (the policy's label is left out for the legacy policy)
(the digest of the rows' content, the shard's) holding a uint8 array (rows, height,
width, 3). A shard appears under its final name only when complete; until then it is a
``.rows-<start>-<stop>-<digest>.npy.<random>.partial`` file locked by its writer. A job that
finds a shard missing takes the shard's fill lock (``.rows-...npy.lock``) before decoding: a
second job that needs the same shard meanwhile waits for it and then reads the finished shard,
so images are decoded once even when several models' jobs start together. Each shard's digest
sits beside it (``rows-...npy.xxh3``, `vlbench.hashing`), written before the shard takes its
final name; a shard whose bytes no longer match it (or that has none) is not used: it is
removed and its rows decoded again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from vlbench.atomic import (
    apply_umask,
    is_no_space,
    locked_partial,
    no_space_error,
    npy_bytes,
    reserved_npy_file,
    same_file,
    sweep_partials,
    write_at,
    write_text,
)
from vlbench.data.decode_policy import LEGACY, DecodePolicy, read_policy
from vlbench.hashing import remove_with_sidecar, sidecar_mismatch, write_sidecar

LOG = logging.getLogger("vlbench")
PARQUET_MAGIC = b"PAR1"


def source_fingerprint(path: str | Path) -> str:
    """A cheap identity of a parquet file: its size and footer (row groups, offsets, sizes)."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as handle:
        handle.seek(max(size - 8, 0))
        tail = handle.read(8)
        footer_length = int.from_bytes(tail[:4], "little") if tail[4:] == PARQUET_MAGIC else 0
        handle.seek(max(size - 8 - footer_length, 0))
        footer = handle.read(footer_length)
    digest = hashlib.sha256(str(size).encode() + b"\0" + footer)
    return digest.hexdigest()[:12]


class PixelCache:
    """Where the uint8 pixel shards of one (benchmark, geometry, source) live: `folder` is the
    benchmark's pixel-cache folder (``<root>/<benchmark>``, `Shard.pixel_folder`)."""

    def __init__(
        self,
        folder: str | Path,
        geometry_key: str,
        source: str | Path,
        rows_digest: str = "",
        policy: DecodePolicy | None = None,
    ) -> None:
        # The decode policy the source was prepared with (`policy`, when read already) changes
        # the pixels: it is part of the folder's name (files of the legacy policy keep the names
        # they had before policies).
        self.policy = read_policy(source) if policy is None else policy
        decode = "" if self.policy == LEGACY else f"-{self.policy.label}"
        self.directory = Path(folder) / f"{geometry_key}{decode}-{source_fingerprint(source)}"
        # The shard's digest of the rows' ids and image bytes: an image replaced by one of
        # the same size, which may leave the parquet footer unchanged, still misses the cache.
        self.suffix = f"-{rows_digest}" if rows_digest else ""

    def shard_path(self, start: int, stop: int) -> Path:
        """The cache file of rows [start, stop)."""
        return self.directory / f"rows-{start:09d}-{stop:09d}{self.suffix}.npy"

    def load(self, start: int, stop: int) -> np.ndarray | None:
        """The cached pixels of rows [start, stop), memory-mapped; None when not cached (or
        when the cached shard fails its digest: it is removed, to be decoded again)."""
        path = self.shard_path(start, stop)
        if not path.is_file():
            return None
        problem = sidecar_mismatch(path)
        if problem is not None:
            LOG.warning("pixel cache %s: %s; not used, decoding its rows again", path, problem)
            remove_with_sidecar(path)
            return None
        pixels = np.load(path, mmap_mode="r", allow_pickle=False)
        if pixels.ndim != 4 or pixels.shape[0] != stop - start or pixels.dtype != np.uint8:
            return None
        return pixels

    @contextlib.contextmanager
    def filling(self, start: int, stop: int) -> Iterator[float]:
        """Hold the right to fill rows [start, stop); yields the seconds spent waiting for
        another process that held it. The lock file lives only while held: its holder removes
        it before letting go, and a waiter that wakes on a removed one takes a fresh one.
        Without file locks (some network file systems) nobody waits: concurrent fillers then
        decode the same rows, and the last rename wins."""
        path = self.shard_path(start, stop)
        lock = path.with_name(f".{path.name}.lock")
        lock.parent.mkdir(parents=True, exist_ok=True)
        began = time.perf_counter()
        while True:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                break  # no locks here
            if same_file(fd, lock):
                break
            os.close(fd)
        try:
            yield time.perf_counter() - began
        finally:
            lock.unlink(missing_ok=True)
            os.close(fd)

    def describe(self, geometry: dict[str, Any]) -> None:
        """Write a human-readable note of the geometry this directory holds (once)."""
        note = self.directory / "geometry.json"
        if not note.is_file():
            described = {**geometry, "decode_policy": self.policy.as_dict()}
            write_text(note, json.dumps(described, indent=2, sort_keys=True) + "\n")


class PixelShardWriter:
    """Fill a cache shard batch by batch on disk; publish it only when every row is written.

    The shard's full size is reserved on disk first, so a full disk is a one-line error before
    any pixel is written. Batches are written at their offsets (not through a mapping, whose
    written pages would stay in the job's resident memory until the shard is done). While
    filling, the writer locks its partial file; partial files of the shard that nobody holds
    are removed when a writer starts and when it finishes.
    """

    def __init__(self, cache: PixelCache, start: int, stop: int) -> None:
        self.path = cache.shard_path(start, stop)
        self.rows = stop - start
        self.filled = 0
        self.nbytes = 0
        self._tmp: Path | None = None
        self._handle: IO[bytes] | None = None
        self._data_offset: int | None = None
        self._row_bytes = 0

    def _open_partial(self) -> None:
        """Create and lock this writer's partial file (stale ones of the shard swept first)."""
        fd, self._tmp = locked_partial(self.path)
        self._handle = os.fdopen(fd, "r+b")
        apply_umask(self._tmp)

    def _start(self, shape: tuple[int, ...]) -> None:
        self.nbytes = npy_bytes(np.uint8, shape)
        try:
            self._open_partial()
            assert self._handle is not None
            self._data_offset = reserved_npy_file(self._handle, np.uint8, shape)
            self._row_bytes = int(np.prod(shape[1:]))
        except OSError as exc:
            self._discard()
            if is_no_space(exc):
                raise no_space_error(self.path, self.nbytes, exc) from exc
            raise

    def append(self, pixels: np.ndarray) -> None:
        """Add the next batch of uint8 pixels (n, height, width, 3)."""
        if self._data_offset is None:
            self._start((self.rows, *pixels.shape[1:]))
        assert self._handle is not None and self._data_offset is not None
        if self.filled + len(pixels) > self.rows or pixels.dtype != np.uint8:
            raise ValueError(f"{self.path}: batch does not fit the shard's rows or dtype")
        data = memoryview(np.ascontiguousarray(pixels)).cast("B")
        if len(data) != len(pixels) * self._row_bytes:
            raise ValueError(f"{self.path}: batch shape {pixels.shape} differs from the shard's")
        try:
            write_at(self._handle.fileno(), data, self._data_offset + self.filled * self._row_bytes)
        except OSError as exc:
            if is_no_space(exc):
                raise no_space_error(self.path, self.nbytes, exc) from exc
            raise
        self.filled += len(pixels)

    def _discard(self) -> None:
        self._data_offset = None
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
            self._tmp = None
        if self._handle is not None:
            # Closing flushes what is buffered; on a full disk that fails, and the partial is
            # gone anyway (the descriptor is closed all the same).
            with contextlib.suppress(OSError):
                self._handle.close()
            self._handle = None

    def close(self, success: bool) -> bool:
        """Publish the shard if it is complete and `success`, else discard it; True if published."""
        if self._data_offset is None or self._tmp is None:
            self._discard()
            return False
        published = False
        try:
            if success and self.filled == self.rows:
                assert self._handle is not None
                os.fsync(self._handle.fileno())  # on disk before it is published
                write_sidecar(self._tmp, self.path)
                os.replace(self._tmp, self.path)
                self._tmp = None
                published = True
        except OSError as exc:
            if is_no_space(exc):
                raise no_space_error(self.path, self.nbytes, exc) from exc
            raise
        finally:
            self._discard()
            with contextlib.suppress(OSError):
                sweep_partials(self.path)
        return published
