"""The one exception type vlbench raises for bad input, with a one-line cause."""

from __future__ import annotations

from pathlib import Path


class VlbenchError(Exception):
    """A user-facing error: the message names the file, row or key at fault in one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


def require_path(path: str | Path, what: str, directory: bool = False) -> Path:
    """Fail with a one-line error naming `what` when a local path is missing."""
    path = Path(path)
    if not (path.is_dir() if directory else path.is_file()):
        kind = "directory" if directory else "file"
        raise VlbenchError(f"{what}: {kind} not found: {path}")
    return path
