"""Checksums of files, read in blocks so large weights and archives never sit in memory.

sha256 for published files (weights, downloads). And the digests of the stored files a later
job trusts, recorded when written and checked before reuse: an embedding shard, a gathered
embedding matrix and its ids, a faiss index and a pixel-cache array are read again by later
jobs or runs that cannot tell a flipped bit or a truncated file from good data (numpy reads
both, or fails with a message that names no file). Their writers record the xxh3 128-bit digest
of each file's bytes (xxhash; a non-cryptographic hash: it guards against damage, not against
tampering) in the provenance record written last, or in a sidecar `<file>.xxh3`, and every
reader checks it first: a stored shard or pixel array that fails is recomputed, a gathered
matrix or index that fails stops the job that reads it, naming the file. What the check costs
is measured in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from vlbench.atomic import write_text
from vlbench.errors import VlbenchError


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


# --- Digests of stored files a later job trusts ---------------------------------------------
DIGEST_ALGORITHM = "xxh3_128"
SIDECAR_SUFFIX = ".xxh3"


def file_digest(path: str | Path) -> str:
    """The xxh3-128 hex digest of a file's bytes, read in 4 MiB chunks."""
    import xxhash

    digest = xxhash.xxh3_128()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def digests(files: Mapping[str, str | Path]) -> dict[str, str]:
    """The digest of every named file (name -> path), for a provenance record."""
    return {name: file_digest(path) for name, path in files.items()}


def mismatch(path: str | Path, expected: str | None) -> str | None:
    """Why a file does not hold the bytes its digest was recorded for (None: it does)."""
    if expected is None:
        return "no digest was recorded for it (written before digests, or by an interrupted job)"
    try:
        actual = file_digest(path)
    except FileNotFoundError:
        return "it is missing"
    except OSError as error:
        return f"it cannot be read ({error.strerror or error})"
    if actual != expected:
        return f"its bytes do not match the {DIGEST_ALGORITHM} digest recorded when it was written"
    return None


def mismatches(files: Mapping[str, str | Path], recorded: Mapping[str, str] | None) -> list[str]:
    """'PATH: why' for every named file whose recorded digest it does not match."""
    found = []
    for name, path in files.items():
        problem = mismatch(path, (recorded or {}).get(name))
        if problem is not None:
            found.append(f"{path}: {problem}")
    return found


def _refuse(damaged: str, remedy: str) -> VlbenchError:
    """The one-line error for a damaged file ('PATH: why') that a job will not use."""
    return VlbenchError(f"{damaged} (corrupt or truncated: not used); {remedy}")


def require_intact(
    files: Mapping[str, str | Path], recorded: Mapping[str, str] | None, remedy: str
) -> None:
    """Stop with one line naming the first file that fails its digest, and what to do."""
    found = mismatches(files, recorded)
    if found:
        raise _refuse(found[0], remedy)


def sidecar(path: str | Path) -> Path:
    """Where a file's digest is kept when no provenance record carries it."""
    path = Path(path)
    return path.with_name(path.name + SIDECAR_SUFFIX)


def write_sidecar(content: str | Path, path: str | Path | None = None) -> None:
    """Record the digest of the finished file `content` beside `path` (default: beside it), so
    that a file can be digested before it is renamed into place."""
    write_text(sidecar(path or content), f"{DIGEST_ALGORITHM} {file_digest(content)}\n")


def sidecar_mismatch(path: str | Path) -> str | None:
    """Why a file does not match the digest beside it (None: it does)."""
    try:
        algorithm, expected = sidecar(path).read_text(encoding="utf-8").split()
    except (OSError, ValueError):
        expected = None
    else:
        if algorithm != DIGEST_ALGORITHM:
            expected = None
    return mismatch(path, expected)


def require_sidecar_intact(path: str | Path, remedy: str) -> None:
    """Stop with one line naming a file that fails the digest beside it, and what to do."""
    problem = sidecar_mismatch(path)
    if problem is not None:
        raise _refuse(f"{path}: {problem}", remedy)


def remove_with_sidecar(path: str | Path) -> None:
    """Delete a file and its digest (a damaged cache entry, before it is made again)."""
    for item in (Path(path), sidecar(path)):
        item.unlink(missing_ok=True)
