"""One ranking job: query embeddings against a gallery index, relevant pairs from the qrels."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from vlbench.atomic import atomic_path
from vlbench.canonical import read_qrels
from vlbench.embed import load_embeddings
from vlbench.errors import VlbenchError
from vlbench.index import read_index_vectors
from vlbench.ranking import TiePolicy, exact_ranks
from vlbench.retrieval import rank_table, relevance_from_qrels


def rank_direction(
    direction: str,
    queries_npy: str | Path,
    query_ids_path: str | Path,
    index_path: str | Path,
    gallery_ids_path: str | Path,
    qrels_path: str | Path,
    out_path: str | Path,
    tie_policy: TiePolicy = "index",
    block_mb: int = 1024,
) -> int:
    """Write the exact rank of every relevant (query, item) pair; return the number of pairs."""
    queries, query_ids = load_embeddings(queries_npy, query_ids_path)
    gallery = read_index_vectors(index_path)
    gallery_ids = pq.read_table(gallery_ids_path).column("id").to_pylist()
    if len(gallery_ids) != len(gallery):
        raise VlbenchError(
            f"{index_path}: {len(gallery)} vectors but {len(gallery_ids)} ids in {gallery_ids_path}"
        )
    keep, relevance = relevance_from_qrels(
        read_qrels(qrels_path), direction, query_ids, gallery_ids
    )
    result = exact_ranks(
        queries[keep], gallery, relevance, tie_policy=tie_policy, block_mb=block_mb
    )
    table = rank_table(list(query_ids[keep]), gallery_ids, relevance, result)
    with atomic_path(out_path) as tmp:
        pq.write_table(table, tmp)
    return table.num_rows
