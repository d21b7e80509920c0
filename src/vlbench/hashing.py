"""Checksums of files, read in blocks so large weights and archives never sit in memory."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path


def file_sha256(path: str | Path, chunk: int = 1 << 22) -> str:
    """The sha256 hex digest of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


CHECKSUM_CACHE_ENV = "VLBENCH_CHECKSUM_CACHE"


def checksum_cache_dir() -> Path:
    """Where weights' checksums are remembered between processes, one small file per file
    version: `$VLBENCH_CHECKSUM_CACHE`, else `$XDG_CACHE_HOME/vlbench/sha256` (by default
    `~/.cache/vlbench/sha256`)."""
    if os.environ.get(CHECKSUM_CACHE_ENV):
        return Path(os.environ[CHECKSUM_CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vlbench" / "sha256"


def _version_key(path: str, stat: os.stat_result) -> str:
    """A file version: path, device, inode, size, mtime and ctime (ctime moves on every write,
    and no user call sets it back)."""
    parts = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    return path + "\0" + " ".join(map(str, parts))


def _remembered(entry: Path, key: str) -> str | None:
    try:
        digest, stored_key = entry.read_text(encoding="utf-8").split("\n", 1)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if stored_key != key or len(digest) != 64:
        return None
    return digest


def _remember(entry: Path, key: str, digest: str) -> None:
    """Best effort (a read-only home only costs the next process a re-hash); atomic."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")
        tmp.write_text(f"{digest}\n{key}", encoding="utf-8")
        os.replace(tmp, entry)
    except OSError:
        pass


@functools.lru_cache(maxsize=64)
def _sha256_of_version(key: str) -> str:
    path = key.split("\0", 1)[0]
    entry = checksum_cache_dir() / hashlib.sha256(key.encode()).hexdigest()
    digest = _remembered(entry, key)
    if digest is None:
        digest = file_sha256(path)
        _remember(entry, key, digest)
    return digest


def weights_sha256(path: str | Path) -> str:
    """`file_sha256` computed once per version (device, inode, size, mtime, ctime) of a file.

    A model job checks and records its weights' checksum in several places, and every
    embedding job of a model needs it; large weights take seconds to hash each time, so the
    digest is remembered in the process and, across processes, in `checksum_cache_dir()`.
    """
    resolved = str(Path(path).resolve())
    return _sha256_of_version(_version_key(resolved, os.stat(resolved)))
