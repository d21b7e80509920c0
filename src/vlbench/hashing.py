"""Checksums of files, read in blocks so large weights and archives never sit in memory."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path


def file_sha256(path: str | Path, chunk: int = 1 << 22) -> str:
    """The sha256 hex digest of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


@functools.lru_cache(maxsize=64)
def _sha256_of_version(path: str, size: int, mtime_ns: int) -> str:
    return file_sha256(path)


def weights_sha256(path: str | Path) -> str:
    """`file_sha256` computed once per process for each version (size, mtime) of a file.

    A model job checks and records its weights' checksum in several places; large weights
    take seconds to hash each time.
    """
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return _sha256_of_version(str(resolved), stat.st_size, stat.st_mtime_ns)
