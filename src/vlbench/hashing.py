"""Checksums of files, read in blocks so large weights and archives never sit in memory."""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_sha256(path: str | Path, chunk: int = 1 << 22) -> str:
    """The sha256 hex digest of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
