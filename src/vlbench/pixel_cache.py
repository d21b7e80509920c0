"""On-disk cache of decoded, resized and cropped images: uint8 shards shared by every model.

One directory per (benchmark, geometric transform, prepared source file); one file per row range:
``<root>/<benchmark>/<geometry key>-<source fingerprint>/rows-<start>-<stop>.npy`` holding a
uint8 array (rows, height, width, 3). A shard appears under its final name only when complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from vlbench.atomic import write_text

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
    """Where the uint8 pixel shards of one (benchmark, geometry, source) live."""

    def __init__(
        self, root: str | Path, benchmark: str, geometry_key: str, source: str | Path
    ) -> None:
        self.directory = Path(root) / benchmark / f"{geometry_key}-{source_fingerprint(source)}"

    def shard_path(self, start: int, stop: int) -> Path:
        """The cache file of rows [start, stop)."""
        return self.directory / f"rows-{start:09d}-{stop:09d}.npy"

    def load(self, start: int, stop: int) -> np.ndarray | None:
        """The cached pixels of rows [start, stop), memory-mapped; None when not cached."""
        path = self.shard_path(start, stop)
        if not path.is_file():
            return None
        pixels = np.load(path, mmap_mode="r", allow_pickle=False)
        if pixels.ndim != 4 or pixels.shape[0] != stop - start or pixels.dtype != np.uint8:
            return None
        return pixels

    def describe(self, geometry: dict[str, Any]) -> None:
        """Write a human-readable note of the geometry this directory holds (once)."""
        note = self.directory / "geometry.json"
        if not note.is_file():
            write_text(note, json.dumps(geometry, indent=2, sort_keys=True) + "\n")


class PixelShardWriter:
    """Fill a cache shard batch by batch on disk; publish it only when every row is written."""

    def __init__(self, cache: PixelCache, start: int, stop: int) -> None:
        self.path = cache.shard_path(start, stop)
        self.rows = stop - start
        self.filled = 0
        self._tmp: Path | None = None
        self._array: np.memmap | None = None

    def append(self, pixels: np.ndarray) -> None:
        """Add the next batch of uint8 pixels (n, height, width, 3)."""
        if self._array is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, name = tempfile.mkstemp(
                prefix=f".{self.path.name}.", suffix=".partial", dir=self.path.parent
            )
            os.close(handle)
            self._tmp = Path(name)
            shape = (self.rows, *pixels.shape[1:])
            self._array = np.lib.format.open_memmap(
                self._tmp, mode="w+", dtype=np.uint8, shape=shape
            )
        self._array[self.filled : self.filled + len(pixels)] = pixels
        self.filled += len(pixels)

    def close(self, success: bool) -> bool:
        """Publish the shard if it is complete and `success`, else discard it; True if published."""
        if self._array is None or self._tmp is None:
            return False
        self._array.flush()
        self._array = None
        published = success and self.filled == self.rows
        if published:
            os.replace(self._tmp, self.path)
        else:
            self._tmp.unlink(missing_ok=True)
        return published
