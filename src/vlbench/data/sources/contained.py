"""Paths read from a data file stay inside the folder (or archive) they are relative to.

An annotation CSV's id or `filepath`, a Karpathy JSON's `filepath`/`filename` and an archive's
member names come from the data, not from the config. One that is absolute, climbs out with
`..`, or (for a local folder) is a symbolic link whose target lies outside the folder would read
a file the benchmark's content fingerprint does not cover (an edit there would leave the
results stale) and that nobody meant to evaluate: it is refused with the file, row and path.

Hub snapshots are the exception for links: the hub cache stores every file of a snapshot as a
link into its own blob store, so for hub sources only the path as written is checked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from vlbench.errors import VlbenchError


def follows_links(source: Mapping[str, Any]) -> bool:
    """Whether a source's files are checked after symbolic links (local folders, not the hub)."""
    return "repo" not in source


def relative_inside(relative: str, where: str, base: str) -> PurePosixPath:
    """`relative` as written, refused if absolute or if it climbs out of `base` with '..'."""
    path = PurePosixPath(relative.replace("\\", "/"))
    if path.is_absolute() or (path.parts and path.parts[0].endswith(":")):
        raise VlbenchError(f"{where}: path {relative!r} is absolute; it must lie inside {base}")
    if os.path.normpath(str(path)).split("/")[0] == "..":
        raise VlbenchError(f"{where}: path {relative!r} leaves {base} ('..')")
    return path


class ContainedFolder:
    """A folder whose data-file paths must resolve inside it (after links, if `follow_links`)."""

    def __init__(self, folder: Path, follow_links: bool = True) -> None:
        self.folder = Path(folder)
        self.real = os.path.realpath(self.folder) if follow_links else None

    def path(self, relative: str, where: str) -> Path:
        """`folder / relative`, or a one-line error naming `where` (file and row) and the path."""
        inner = relative_inside(relative, where, str(self.folder))
        candidate = self.folder / inner
        if self.real is not None:
            real = os.path.realpath(candidate)
            if os.path.commonpath([self.real, real]) != self.real:
                raise VlbenchError(
                    f"{where}: path {relative!r} is a link to {real}, outside {self.folder}"
                )
        return candidate


def member_name(name: str, archive: Path) -> str:
    """An archive member's name, refused if absolute or climbing out with '..'."""
    relative_inside(name, str(archive), "the archive")
    return name
