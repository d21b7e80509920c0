"""One workflow ranking job: a prepared benchmark's direction -> the per-pair ranks parquet."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from vlbench.atomic import atomic_path
from vlbench.data.canonical import ID_COLUMNS, read_candidates, read_parquet, read_qrels
from vlbench.embedding.matrix_files import read_checked_embeddings, read_embedding_ids
from vlbench.errors import VlbenchError
from vlbench.paths import MODALITY_FILES
from vlbench.protocols import DIRECTIONS, Protocol
from vlbench.rank.exact import TiePolicy
from vlbench.rank.index import read_index_vectors
from vlbench.rank.protocol_ranks import Side, normalise_rows, rank_protocol


def read_groups(canonical_path: str | Path, modality: str, ids: np.ndarray) -> np.ndarray | None:
    """The `group` of each embedded id, from the canonical images/texts parquet (None if absent)."""
    schema = pq.read_schema(canonical_path)
    if "group" not in schema.names:
        return None
    id_column = ID_COLUMNS[modality]
    table = read_parquet(canonical_path, columns=[id_column, "group"])
    lookup = dict(
        zip(table.column(id_column).to_pylist(), table.column("group").to_pylist(), strict=True)
    )
    missing = [item for item in ids.tolist() if item not in lookup]
    if missing:
        raise VlbenchError(f"{canonical_path}: embedded id {missing[0]!r} is not in the file")
    groups = np.asarray([lookup[item] for item in ids.tolist()], dtype=object)
    return None if all(group is None for group in groups) else groups


def judgements_for(qrels_path: str | Path, direction: str) -> pl.DataFrame:
    """Canonical qrels as `query_id, item_id, relevance` for one direction."""
    query_modality, gallery_modality = DIRECTIONS[direction]
    table = pl.from_arrow(read_qrels(qrels_path))
    return table.select(
        pl.col(ID_COLUMNS[query_modality]).alias("query_id"),
        pl.col(ID_COLUMNS[gallery_modality]).alias("item_id"),
        pl.col("relevance"),
    )


def candidates_for(candidates_path: str | Path | None, direction: str) -> pl.DataFrame | None:
    """The candidate lists of this direction's queries; None when no query is restricted."""
    if candidates_path is None or not Path(candidates_path).is_file():
        return None
    query_modality = DIRECTIONS[direction][0]
    table = pl.from_arrow(read_candidates(candidates_path))
    table = table.filter(pl.col("query_modality") == query_modality)
    return table.drop("query_modality") if table.height else None


def rank_direction(
    protocol: Protocol,
    direction: str,
    queries_npy: str | Path,
    query_ids_path: str | Path,
    index_path: str | Path,
    gallery_ids_path: str | Path,
    data_dir: str | Path,
    out_path: str | Path,
    tie_policy: TiePolicy = "index",
    block_mb: int = 1024,
) -> int:
    """Write the exact rank of every relevant (query, item) pair; return the number of pairs.

    The caller has checked the query matrix and both id files against their digests
    (`vlbench.metrics.evaluate.evaluate`, once per file per job, before it builds the index
    read here)."""
    query_modality, gallery_modality = DIRECTIONS[direction]
    data_dir = Path(data_dir)
    query_vectors, query_ids = read_checked_embeddings(queries_npy, query_ids_path)
    gallery_vectors = read_index_vectors(index_path)
    gallery_ids = read_embedding_ids(gallery_ids_path)
    if len(gallery_ids) != len(gallery_vectors):
        raise VlbenchError(
            f"{index_path}: {len(gallery_vectors)} vectors but {len(gallery_ids)} ids in "
            f"{gallery_ids_path}"
        )
    files = {modality: data_dir / name for modality, name in MODALITY_FILES.items()}
    queries = Side(
        normalise_rows(query_vectors, str(queries_npy), query_ids),
        query_ids,
        read_groups(files[query_modality], query_modality, query_ids),
        name=f"{query_modality} queries",
    )
    gallery = Side(
        normalise_rows(gallery_vectors, str(index_path), gallery_ids),
        gallery_ids,
        read_groups(files[gallery_modality], gallery_modality, gallery_ids),
        name=f"{gallery_modality} gallery",
    )
    needs_qrels = protocol.needs_judgements
    ranks = rank_protocol(
        protocol,
        queries,
        gallery,
        judgements_for(data_dir / "qrels.parquet", direction) if needs_qrels else None,
        candidates_for(data_dir / "candidates.parquet", direction),
        tie_policy=tie_policy,
        block_mb=block_mb,
    )
    with atomic_path(out_path) as tmp:
        ranks.write_parquet(tmp)
    return ranks.height
