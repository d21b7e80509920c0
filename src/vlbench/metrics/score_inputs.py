"""The input files of `vlbench score` (docs/score.md): embedding matrices with their ids, and
the judgements and candidate lists of a direction, each checked with a one-line error naming the
file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from vlbench.errors import VlbenchError
from vlbench.protocols import DIRECTIONS
from vlbench.rank.protocol_ranks import Side, normalise_rows

# The embedding dtypes accepted: booleans, integers and real floats (never complex).
REAL_KINDS = "biuf"


def _read_parquet(path: str | Path, what: str, required: Sequence[str]) -> pl.DataFrame:
    try:
        table = pl.read_parquet(path)
    except FileNotFoundError as exc:
        raise VlbenchError(f"{what}: file not found: {path}") from exc
    except (pl.exceptions.ComputeError, OSError) as exc:
        raise VlbenchError(f"{what}: {path} is not a readable parquet file ({exc})") from exc
    missing = [name for name in required if name not in table.columns]
    if missing:
        raise VlbenchError(
            f"{path}: missing column(s) {', '.join(missing)} (has: {', '.join(table.columns)})"
        )
    return table


NPY_MAGIC = b"\x93NUMPY"


def read_matrix(npy: str, name: str) -> np.ndarray:
    """A numeric .npy matrix, read without pickle; other files are one-line errors."""
    try:
        with open(npy, "rb") as handle:
            head = handle.read(len(NPY_MAGIC))
    except FileNotFoundError as exc:
        raise VlbenchError(f"{name}: file not found: {npy}") from exc
    except OSError as exc:
        raise VlbenchError(f"{name}: cannot read {npy} ({exc.strerror or exc})") from exc
    if head != NPY_MAGIC:
        what = "an .npz archive" if head.startswith(b"PK") else f"it starts with {head!r}"
        raise VlbenchError(
            f"{name}: {npy} is not a .npy file ({what}); save one matrix with numpy.save"
        )
    try:
        return np.load(npy, allow_pickle=False)
    except ValueError as exc:
        if "Object arrays" in str(exc):
            raise VlbenchError(
                f"{name}: {npy} holds Python objects (dtype object), not numbers"
            ) from exc
        raise VlbenchError(f"{name}: {npy} is not a plain .npy matrix ({exc})") from exc


def read_side(npy: str, ids_path: str, name: str) -> Side:
    """Vectors from a .npy matrix plus ids (and optional groups) from a parquet file."""
    vectors = read_matrix(npy, name)
    if vectors.ndim != 2:
        raise VlbenchError(f"{npy}: expected a 2-D matrix, got shape {vectors.shape}")
    if np.iscomplexobj(vectors):
        raise VlbenchError(
            f"{npy}: complex-valued embeddings (dtype {vectors.dtype}) are not supported; "
            "give a real-valued matrix"
        )
    if vectors.dtype.kind not in REAL_KINDS:
        raise VlbenchError(f"{npy}: expected a numeric matrix, got dtype {vectors.dtype}")
    table = _read_parquet(ids_path, name, ["id"])
    ids = np.asarray([str(item) for item in table["id"].to_list()], dtype=object)
    groups = (
        np.asarray(table["group"].cast(pl.String).to_list(), dtype=object)
        if "group" in table.columns
        else None
    )
    if len(ids) != len(vectors):
        raise VlbenchError(f"{npy}: {len(vectors)} rows but {ids_path} has {len(ids)} ids")
    return Side(normalise_rows(vectors, npy, ids), ids, groups, name=name)


def read_judgements(path: str | None, direction: str | None = None) -> pl.DataFrame | None:
    """query_id, item_id and (optional, default 1) relevance.

    The workflow's own qrels (image_id, text_id[, relevance]) are read for `direction`: its
    query modality's id becomes query_id and the other one item_id.
    """
    if path is None:
        return None
    table = _read_parquet(path, "qrels", [])
    if not {"query_id", "item_id"} <= set(table.columns) and {"image_id", "text_id"} <= set(
        table.columns
    ):
        if direction not in DIRECTIONS:
            raise VlbenchError(
                f"{path}: image_id/text_id qrels need --direction image_to_text or "
                f"text_to_image (got {direction!r})"
            )
        query_modality, gallery_modality = DIRECTIONS[direction]
        table = table.rename(
            {f"{query_modality}_id": "query_id", f"{gallery_modality}_id": "item_id"}
        )
    missing = [name for name in ("query_id", "item_id") if name not in table.columns]
    if missing:
        raise VlbenchError(
            f"{path}: missing column(s) {', '.join(missing)} (has: {', '.join(table.columns)}; "
            "give query_id + item_id, or the workflow's image_id + text_id)"
        )
    if "relevance" not in table.columns:
        table = table.with_columns(pl.lit(1).alias("relevance"))
    check_relevance(table, path)
    return table.select(
        pl.col("query_id").cast(pl.String),
        pl.col("item_id").cast(pl.String),
        pl.col("relevance").cast(pl.Int64),
    )


def check_relevance(table: pl.DataFrame, path: str) -> None:
    """Relevance is 0 (judged not relevant) or a positive whole grade, never negative or empty."""
    relevance = table["relevance"]
    if not relevance.dtype.is_numeric():
        raise VlbenchError(f"{path}: column 'relevance' holds {relevance.dtype}, not numbers")
    values = relevance.cast(pl.Float64)
    bad = values.is_null() | ~values.is_finite() | (values < 0) | (values != values.floor())
    rows = bad.fill_null(True).arg_true()
    if len(rows):
        row = int(rows[0])
        raise VlbenchError(
            f"{path}: row {row}: relevance {values[row]} of query {table['query_id'][row]!r} and "
            f"item {table['item_id'][row]!r} must be 0 (not relevant) or a positive whole grade"
        )


def read_candidate_lists(path: str | None, direction: str | None = None) -> pl.DataFrame | None:
    """query_id, candidate_ids (list) and optional candidate_groups (list).

    A workflow candidates file (with query_modality) keeps only the rows of `direction`'s
    query modality.
    """
    if path is None:
        return None
    table = _read_parquet(path, "candidates", ["query_id", "candidate_ids"])
    if "query_modality" in table.columns and direction in DIRECTIONS:
        table = table.filter(pl.col("query_modality") == DIRECTIONS[direction][0])
    columns = [pl.col("query_id").cast(pl.String), pl.col("candidate_ids")]
    if "candidate_groups" in table.columns:
        columns.append(pl.col("candidate_groups"))
    return table.select(columns)
