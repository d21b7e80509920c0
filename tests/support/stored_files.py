"""Damaging stored files and comparing finished runs, for the fault tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

# The folders whose files two runs of the same config must hold byte for byte.
COMPARED = ["results/embeddings", "results/ranks", "results/tables"]


def flip(path: Path) -> None:
    """Invert a few bytes in the middle of a file, keeping its size (and make it newer)."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 8] = bytes(byte ^ 0xFF for byte in data[middle : middle + 8])
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    """Cut a file to its first half."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


DAMAGES: dict[str, Callable[[Path], None]] = {"flipped": flip, "truncated": truncate}


def files_under(root: Path) -> dict[str, bytes]:
    """Relative path -> content of every finished file below the compared folders.

    Provenance JSON (timings, host) and hidden partials are left out.
    """
    found = {}
    for folder in COMPARED:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and path.suffix != ".json" and not path.name.startswith("."):
                found[str(path.relative_to(root))] = path.read_bytes()
    return found
