"""Prepare any configured benchmark source into the canonical layout (see vlbench.canonical)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vlbench.config import source_kind
from vlbench.errors import VlbenchError
from vlbench.hub_layout import download_dataset, split_files
from vlbench.prepare_paired import prepare_paired
from vlbench.workflow import require_path

PROTOCOLS = {"paired": prepare_paired}


def prepare_benchmark(
    benchmark: str,
    protocol: str,
    source: dict[str, Any],
    local_dir: str | Path | None,
    out_dir: str | Path,
) -> int:
    """Locate the source's split files (downloading pinned hub data if needed) and prepare them."""
    if protocol not in PROTOCOLS:
        raise VlbenchError(f"unknown protocol {protocol!r} (known: {', '.join(PROTOCOLS)})")
    split = source.get("split", "test")
    kind = source_kind(source)
    if kind == "hub":
        repo_dir = download_dataset(source["repo"], source["revision"], split, cache_dir=None)
        provenance = {"source": "hub", "repo": source["repo"], "revision": source["revision"]}
    else:
        where = f"benchmarks.{benchmark}.source.path"
        repo_dir = require_path(local_dir or source.get("path", ""), where, directory=True)
        provenance = {"source": kind, "path": str(local_dir), "revision": None}
        if kind == "synthetic":
            provenance.update(source["synthetic"])
    files = split_files(repo_dir, split)
    provenance.update({"split": split, "files": [path.name for path in files]})
    return PROTOCOLS[protocol](files, out_dir, provenance)
