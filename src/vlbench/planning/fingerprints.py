"""Cheap fingerprints of user-supplied files, so that editing one reruns the jobs that read it.

Snakemake reruns a job when a declared input is newer than its outputs or when a param changes.
A benchmark folder or a model file edited in place, replaced by an older copy, or rewritten
inside a folder whose own mtime stays the same slips past the first test, so the rules pass a
fingerprint of every file they read as a param: the sorted (relative path, size, mtime_ns) of each
file below a folder, hashed. That costs one `stat` per file (no file is opened), which keeps
planning fast for image folders of 100,000 files (benchmarks/RESULTS.md, "Content tracking").
A file named on its own (config JSON, annotation CSV, reference table) of up to 16 MiB is hashed
by content instead.

Entries whose name starts with "." (`.git`, `.cache`, `.DS_Store`, editor swap files) are left
out: they cannot change a number, and tools write them on their own.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_module
from collections.abc import Iterable
from pathlib import Path

MISSING = "missing"
CONTENT_HASH_BYTES = 16 * 2**20


def _tree_entries(root: str) -> list[tuple[str, int, int]]:
    """(path relative to root, size, mtime_ns) of every file below root, symlinks followed once."""
    entries: list[tuple[str, int, int]] = []
    root_stat = os.stat(root)
    seen = {(root_stat.st_dev, root_stat.st_ino)}
    pending = [(root, "")]
    while pending:
        folder, prefix = pending.pop()
        with os.scandir(folder) as listing:
            for entry in listing:
                name = entry.name
                if name.startswith("."):
                    continue
                try:
                    stat = entry.stat()
                except FileNotFoundError:  # a dangling link or a file removed meanwhile
                    continue
                if entry.is_dir():
                    if (stat.st_dev, stat.st_ino) not in seen:
                        seen.add((stat.st_dev, stat.st_ino))
                        pending.append((entry.path, f"{prefix}{name}/"))
                    continue
                entries.append((prefix + name, stat.st_size, stat.st_mtime_ns))
    entries.sort()
    return entries


def _content_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def path_entries(path: str | Path) -> list[tuple[str, int, int | str]]:
    """The fingerprint entries of one file or folder; a missing path is one 'missing' entry.

    A file named on its own (a config, an annotation CSV, a checkpoint) of at most
    `CONTENT_HASH_BYTES` is identified by its content, so an edit that keeps the size and the
    modification time is seen too; larger files and the files of a folder by size and mtime.
    """
    path = str(path)
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return [(MISSING, 0, 0)]
    if stat_module.S_ISDIR(stat.st_mode):
        return _tree_entries(path)
    if stat.st_size <= CONTENT_HASH_BYTES:
        return [(os.path.basename(path), stat.st_size, _content_digest(path))]
    return [(os.path.basename(path), stat.st_size, stat.st_mtime_ns)]


def fingerprint(paths: Iterable[str | Path]) -> str:
    """One short string that changes whenever any file below `paths` is added, removed or edited.

    Reads: "<files> files <sha256 prefix>", or "" when `paths` is empty. The order of `paths`
    matters (each is hashed under its position), duplicates are hashed once.
    """
    unique = list(dict.fromkeys(map(str, paths)))
    if not unique:
        return ""
    digest = hashlib.sha256()
    files = 0
    for position, path in enumerate(unique):
        entries = path_entries(path)
        files += sum(name != MISSING for name, _, _ in entries)
        lines = [f"{position}\0{name}\0{size}\0{version}\n" for name, size, version in entries]
        digest.update("".join(lines).encode())
    return f"{files} files {digest.hexdigest()[:20]}"
