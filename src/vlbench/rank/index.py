"""Exact inner-product faiss indexes over embedding matrices.

An index is read again by a later job (the qualitative examples): its digest is written beside
it and checked before that job trusts it (`vlbench.hashing.require_sidecar_intact`).
"""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np

from vlbench.atomic import atomic_path
from vlbench.errors import VlbenchError
from vlbench.hashing import write_sidecar


def build_flat_index(embeddings_path: str | Path, index_path: str | Path) -> int:
    """Write a faiss IndexFlatIP holding every row of the .npy matrix; return the row count."""
    matrix = np.ascontiguousarray(np.load(embeddings_path, allow_pickle=False), dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] == 0:
        raise VlbenchError(
            f"{embeddings_path}: expected a non-empty 2-D matrix, got {matrix.shape}"
        )
    index = faiss.IndexFlatIP(matrix.shape[1])
    index.add(matrix)
    with atomic_path(index_path) as tmp:
        faiss.write_index(index, str(tmp))
        write_sidecar(tmp, index_path)
    return index.ntotal


def read_index_vectors(index_path: str | Path) -> np.ndarray:
    """The stored vectors of a flat index, in insertion order."""
    index = faiss.read_index(str(index_path))
    return index.reconstruct_n(0, index.ntotal)
