"""Embedding matrices on disk, without torch: a matrix, its row ids and its provenance.

Every stage after the embedding reads these (`load_embeddings`), and the embedding job writes
them (`save_matrix`: ids, then the matrix, then the provenance with the digests of both, each
atomically). A reader checks the two files against the recorded digests first and stops, naming
the file and the one command that makes it again, on a mismatch (`require_gathered_intact`).
The stored shards of an embedding job are matrices too (`vlbench.embedding.shard_files`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from vlbench.atomic import atomic_path, npy_bytes, write_text
from vlbench.data.canonical import read_parquet
from vlbench.errors import VlbenchError
from vlbench.hashing import digests, require_intact

IDS_SCHEMA = pa.schema([("id", pa.string())])


@dataclass(frozen=True)
class MatrixFiles:
    """An embedding matrix on disk: `<stem>.npy`, its row ids and its provenance."""

    embeddings: Path
    ids: Path
    provenance: Path

    @classmethod
    def at(cls, stem: str | Path) -> MatrixFiles:
        """The three files of `stem` (`stem.npy`, `stem.ids.parquet`, `stem.json`)."""
        stem = Path(stem)
        return cls(
            stem.with_name(f"{stem.name}.npy"),
            stem.with_name(f"{stem.name}.ids.parquet"),
            stem.with_name(f"{stem.name}.json"),
        )

    @property
    def data(self) -> dict[str, Path]:
        """The matrix and ids files, by the names their digests are recorded under."""
        return {"embeddings": self.embeddings, "ids": self.ids}


def read_embedding_ids(ids_path: str | Path) -> np.ndarray:
    """The row ids of an embedding matrix (its `.ids.parquet`), in row order."""
    return np.asarray(read_parquet(ids_path, columns=["id"]).column("id").to_pylist(), dtype=object)


def clean_hint(path: str | Path) -> str:
    """The one command that makes a damaged embedding or evaluation file of one (model,
    benchmark) again (`results/<stage>/<model>/<benchmark>/<file>`)."""
    path = Path(path)
    model, benchmark = path.parent.parent.name, path.parent.name
    return f"make it again with `vlbench clean {model} {benchmark}` and the same snakemake command"


def require_gathered_intact(npy_path: str | Path) -> MatrixFiles:
    """Check a gathered matrix and its ids against the digests its provenance recorded; stop
    naming the damaged file (and the one command that makes it again) otherwise."""
    files = MatrixFiles.at(Path(npy_path).with_suffix(""))
    try:
        recorded = json.loads(files.provenance.read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        recorded = None
    require_intact(files.data, recorded, clean_hint(files.embeddings))
    return files


def load_embeddings(npy_path: str | Path, ids_path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read a gathered matrix (stored float32 or float16, returned float32) and its ids, once
    both match the digests recorded when they were written; check lengths."""
    require_gathered_intact(npy_path)
    return read_checked_embeddings(npy_path, ids_path)


def read_checked_embeddings(
    npy_path: str | Path, ids_path: str | Path
) -> tuple[np.ndarray, np.ndarray]:
    """`load_embeddings` for a caller that has already checked the files' digests in this
    job (the evaluation job checks each matrix it reads once, before it indexes and ranks)."""
    matrix = np.load(npy_path, allow_pickle=False)
    ids = read_embedding_ids(ids_path)
    if matrix.ndim != 2 or matrix.shape[0] != len(ids):
        raise VlbenchError(
            f"{npy_path}: {matrix.shape} rows do not match the {len(ids)} ids in {ids_path}"
        )
    return matrix.astype(np.float32, copy=False), ids


def save_embeddings(
    ids: Sequence[str], embeddings: np.ndarray, npy_path: Path, ids_path: Path
) -> None:
    """Write the ids, then the matrix (the matrix last: its presence means complete)."""
    with atomic_path(ids_path) as tmp:
        pq.write_table(pa.table([list(ids)], schema=IDS_SCHEMA), tmp)
    expected = npy_bytes(embeddings.dtype, embeddings.shape)
    with atomic_path(npy_path, expected_bytes=expected) as tmp, open(tmp, "wb") as handle:
        np.save(handle, embeddings, allow_pickle=False)


def write_provenance(files: MatrixFiles, record: dict[str, Any]) -> dict[str, Any]:
    """Write a matrix's provenance last, with the digests of its matrix and ids files (what
    every later reader checks them against); return the record written."""
    record = {**record, "files": digests(files.data)}
    write_text(files.provenance, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


def save_matrix(
    files: MatrixFiles, ids: Sequence[str], matrix: np.ndarray, record: dict[str, Any]
) -> dict[str, Any]:
    """Write a matrix, its ids and (last) its provenance with their digests; return it."""
    save_embeddings(ids, matrix, files.embeddings, files.ids)
    return write_provenance(files, record)
