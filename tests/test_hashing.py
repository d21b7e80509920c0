"""Checksums: streamed, and memoised per file version for model weights."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from vlbench.hashing import file_sha256, weights_sha256


def test_file_sha256_streams_blocks_to_the_same_digest(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    payload = os.urandom(3 * 1024 + 17)
    path.write_bytes(payload)
    assert file_sha256(path, chunk=1024) == hashlib.sha256(payload).hexdigest()


def test_weights_sha256_follows_a_rewritten_file(tmp_path: Path) -> None:
    path = tmp_path / "weights.pt"
    path.write_bytes(b"first version")
    assert weights_sha256(path) == hashlib.sha256(b"first version").hexdigest()
    assert weights_sha256(tmp_path / "." / "weights.pt") == weights_sha256(path)
    path.write_bytes(b"second, longer version")
    os.utime(path, ns=(1, 1))
    assert weights_sha256(path) == hashlib.sha256(b"second, longer version").hexdigest()
    path.write_bytes(b"third, longer  version")  # same size: the new mtime tells them apart
    assert weights_sha256(path) == hashlib.sha256(b"third, longer  version").hexdigest()
