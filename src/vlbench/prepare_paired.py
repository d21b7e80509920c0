"""Prepare a paired 1-to-1 image-caption benchmark (BioMedFlickr layout) in canonical form."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vlbench.errors import VlbenchError
from vlbench.sources.hf_parquet import read_paired_files
from vlbench.sources.writer import write_canonical


def prepare_paired(files: list[Path], out_dir: str | Path, provenance: dict[str, Any]) -> int:
    """Stream the source files into the canonical layout; row i's image pairs row i's caption.

    Ids are the global row numbers. Returns the number of pairs.
    """
    if not files:
        raise VlbenchError(f"{out_dir}: the benchmark has no source files")
    meta = write_canonical(
        read_paired_files(files), "paired", out_dir, provenance, where=str(files[0])
    )
    return int(meta["n_images"])
