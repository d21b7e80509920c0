"""Outputs of an earlier config, moved aside so that the results list only the current one.

Switching configs in one directory keeps what the earlier config made: a benchmark's table,
plots and provenance, a paper table, the paired tests. The tables job (which runs whenever
the models, benchmarks or paper tables change) moves every file below `results/tables/` that the
current config does not make, and the plots and provenance of benchmarks it no longer has, to
`results/stale/` (same relative path; an older copy there is replaced). Hidden files (a live
writer's partial) are left alone.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from vlbench.paths import FAILED_RUN_NOTE

RESULTS = Path("results")
STALE = RESULTS / "stale"


def _visible_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(
        path
        for path in folder.rglob("*")
        if path.is_file()
        and not any(part.startswith(".") for part in path.relative_to(folder).parts)
    )


def stale_outputs(
    current_tables: Iterable[str], benchmarks: Iterable[str], results: Path = RESULTS
) -> list[Path]:
    """Files of `results` the current config does not make: below tables/ every file not in
    `current_tables` (paths as the workflow names them, `results/tables/...`), below plots/
    and provenance/ those of benchmarks not in `benchmarks`."""
    keep = {os.path.relpath(path, RESULTS) for path in (*current_tables, FAILED_RUN_NOTE)}
    stale = [
        path
        for path in _visible_files(results / "tables")
        if str(path.relative_to(results)) not in keep
    ]
    names = set(benchmarks)
    for folder in ("plots", "provenance"):
        for path in _visible_files(results / folder):
            first = path.relative_to(results / folder).parts[0]
            benchmark = first if path.parent != results / folder else path.stem
            if benchmark not in names:
                stale.append(path)
    return stale


def move_aside(paths: Iterable[Path], results: Path = RESULTS) -> list[tuple[Path, Path]]:
    """Move each file to the same place under results/stale/; return (from, to) pairs."""
    moved = []
    for path in paths:
        target = results / "stale" / path.relative_to(results)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(path, target)
        moved.append((path, target))
        parent = path.parent
        while parent != results and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    return moved
