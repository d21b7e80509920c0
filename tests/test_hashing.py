"""Checksums: streamed, and memoised per file version for model weights."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from vlbench import hashing
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


def test_weights_sha256_is_remembered_across_processes_per_file_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later process reads the digest from the cache folder instead of hashing again; a
    rewritten file (even one given its old size and mtime back) is hashed anew."""
    monkeypatch.setenv(hashing.CHECKSUM_CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / "weights.pt"
    path.write_bytes(b"version one")
    first = weights_sha256(path)
    assert first == hashlib.sha256(b"version one").hexdigest()
    (entry,) = hashing.checksum_cache_dir().iterdir()
    assert entry.read_text().startswith(first + "\n")
    # a new process: nothing in memory, the remembered digest is used (a planted one shows it)
    hashing._sha256_of_version.cache_clear()
    entry.write_text("e" * 64 + entry.read_text()[64:])
    assert weights_sha256(path) == "e" * 64
    hashing._sha256_of_version.cache_clear()
    stat = path.stat()
    path.write_bytes(b"version two")  # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert weights_sha256(path) == hashlib.sha256(b"version two").hexdigest()


def test_an_unwritable_cache_folder_only_costs_a_re_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv(hashing.CHECKSUM_CACHE_ENV, str(blocker / "sha256"))
    path = tmp_path / "weights.pt"
    path.write_bytes(b"weights")
    hashing._sha256_of_version.cache_clear()
    assert weights_sha256(path) == hashlib.sha256(b"weights").hexdigest()
