"""Retrieval in one direction: relevance from qrels, per-query ranks, and Recall@k rows."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from vlbench.errors import VlbenchError
from vlbench.ranking import RankResult, Relevance
from vlbench.statistics import t_interval

DIRECTIONS = {"image_to_text": ("image", "text"), "text_to_image": ("text", "image")}
METRIC_COLUMNS = [
    "benchmark",
    "subset",
    "model",
    "direction",
    "metric",
    "k",
    "value",
    "ci_low",
    "ci_high",
    "n_queries",
]
RANKS_SCHEMA = pa.schema(
    [
        ("query_id", pa.string()),
        ("item_id", pa.string()),
        ("rank", pa.int64()),
        ("n_tied", pa.int64()),
        ("gallery_size", pa.int64()),
    ]
)


def relevance_from_qrels(
    qrels: pa.Table, direction: str, query_ids: np.ndarray, gallery_ids: np.ndarray
) -> tuple[np.ndarray, Relevance]:
    """Relevant gallery positions per query for `direction`; queries without any are an error."""
    query_modality, gallery_modality = DIRECTIONS[direction]
    query_col, gallery_col = f"{query_modality}_id", f"{gallery_modality}_id"
    gallery_pos = {item: pos for pos, item in enumerate(gallery_ids)}
    query_pos = {item: pos for pos, item in enumerate(query_ids)}
    lists: list[list[int]] = [[] for _ in query_ids]
    for query, item in zip(
        qrels.column(query_col).to_pylist(), qrels.column(gallery_col).to_pylist(), strict=True
    ):
        if query not in query_pos:
            raise VlbenchError(
                f"qrels: {query_col} {query!r} is not among the embedded {query_modality}s"
            )
        if item not in gallery_pos:
            raise VlbenchError(
                f"qrels: {gallery_col} {item!r} is not among the embedded {gallery_modality}s"
            )
        lists[query_pos[query]].append(gallery_pos[item])
    keep = np.array([bool(items) for items in lists], dtype=bool)
    if not keep.any():
        raise VlbenchError(f"qrels: no {query_modality} query has a relevant {gallery_modality}")
    kept = [sorted(set(items)) for items, k in zip(lists, keep, strict=True) if k]
    return np.flatnonzero(keep), Relevance.from_lists(kept)


def rank_table(
    query_ids: Sequence[str], gallery_ids: Sequence[str], relevance: Relevance, result: RankResult
) -> pa.Table:
    """One row per relevant (query, item) pair with its exact rank."""
    owner = relevance.query_of_each_item()
    return pa.table(
        [
            [query_ids[q] for q in owner],
            [gallery_ids[i] for i in relevance.indices],
            result.ranks,
            result.n_tied,
            np.full(len(result.ranks), result.gallery_size, dtype=np.int64),
        ],
        schema=RANKS_SCHEMA,
    )


def per_query(ranks: pl.DataFrame) -> pl.DataFrame:
    """Best rank, number of relevant items and gallery size per query, in first-seen order."""
    return ranks.group_by("query_id", maintain_order=True).agg(
        pl.col("rank").min().alias("best_rank"),
        pl.len().alias("n_relevant"),
        pl.col("gallery_size").first(),
    )


def chance_hit_rate(gallery_size: np.ndarray, n_relevant: np.ndarray, k: int) -> float:
    """Expected hit rate at k under a uniformly random ranking: mean of 1 - C(N-r, k) / C(N, k)."""
    values = []
    for n, r in zip(gallery_size.tolist(), n_relevant.tolist(), strict=True):
        if k >= n - r + 1:
            values.append(1.0)
            continue
        log_miss = (
            math.lgamma(n - r + 1)
            - math.lgamma(n - r - k + 1)
            - math.lgamma(n + 1)
            + math.lgamma(n - k + 1)
        )
        values.append(1.0 - math.exp(log_miss))
    return float(np.mean(values))


def recall_rows(
    ranks: pl.DataFrame, ks: Sequence[int], benchmark: str, subset: str, model: str, direction: str
) -> pl.DataFrame:
    """Recall@k (hit rate, percent) with the 95% t-interval and the chance level, one row per k."""
    queries = per_query(ranks)
    best = queries["best_rank"].to_numpy()
    gallery = queries["gallery_size"].to_numpy()
    relevant = queries["n_relevant"].to_numpy()
    rows = []
    for k in sorted(ks):
        hits = (best <= k).astype(np.float64)
        low, high = t_interval(hits)
        rows.append(
            {
                "benchmark": benchmark,
                "subset": subset,
                "model": model,
                "direction": direction,
                "metric": "recall",
                "k": k,
                "value": 100.0 * hits.mean(),
                "ci_low": 100.0 * low,
                "ci_high": 100.0 * high,
                "n_queries": len(hits),
                "chance": 100.0 * chance_hit_rate(gallery, relevant, k),
            }
        )
    return pl.DataFrame(rows)
