"""Per-query outcome vectors of every metric, and their expected values under a random ranking.

Every metric is the mean (or, for `median_rank`, the median) of a per-query outcome vector, so
confidence intervals, bootstraps and paired tests all work on the same vectors. Outcomes are on
a 0..1 scale here (ranks for `mean_rank`/`median_rank`); tables report percent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import polars as pl


@dataclass(frozen=True)
class QueryRanks:
    """A ranks table regrouped per query (first-seen order); pairs of query q in indptr[q:q+2]."""

    query_ids: np.ndarray
    query_groups: np.ndarray
    gallery_size: np.ndarray
    indptr: np.ndarray
    ranks: np.ndarray
    relevance: np.ndarray
    n_tied: np.ndarray

    @classmethod
    def from_table(cls, ranks: pl.DataFrame) -> QueryRanks:
        """Regroup a ranks table (see vlbench.rank.protocol_ranks.RANKS_COLUMNS)."""
        first = (
            ranks.with_row_index("_row")
            .group_by("query_id", maintain_order=True)
            .agg(
                pl.col("_row"),
                pl.col("query_group").first(),
                pl.col("gallery_size").first(),
            )
        )
        order = np.concatenate(first["_row"].to_list()) if first.height else np.zeros(0, int)
        counts = first["_row"].list.len().to_numpy()
        sizes = first["gallery_size"].to_numpy()
        relevance = (
            ranks["relevance"].to_numpy()[order]
            if "relevance" in ranks.columns
            else np.ones(len(order), dtype=np.int64)
        )
        return cls(
            query_ids=np.asarray(first["query_id"].to_list(), dtype=object),
            query_groups=np.asarray(first["query_group"].to_list(), dtype=object),
            gallery_size=sizes.astype(np.int64),
            indptr=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            ranks=ranks["rank"].to_numpy()[order].astype(np.int64),
            relevance=relevance.astype(np.float64),
            n_tied=ranks["n_tied"].to_numpy()[order].astype(np.int64),
        )

    @property
    def n_queries(self) -> int:
        return len(self.query_ids)

    def n_relevant(self) -> np.ndarray:
        return np.diff(self.indptr)

    def owner(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_queries), self.n_relevant())

    def best_rank(self) -> np.ndarray:
        return np.minimum.reduceat(self.ranks, self.indptr[:-1]) if self.n_queries else self.ranks

    def per_query_sum(self, values: np.ndarray) -> np.ndarray:
        return np.bincount(self.owner(), weights=values, minlength=self.n_queries)

    def tied_at_best(self) -> np.ndarray:
        """Whether the best-ranked relevant item of each query shares its score with another."""
        best = self.best_rank()[self.owner()]
        decisive = (self.ranks == best) & (self.n_tied > 0)
        return self.per_query_sum(decisive.astype(np.float64)) > 0

    def tied_anywhere(self) -> np.ndarray:
        """Whether any relevant item of each query shares its score with another item."""
        return self.per_query_sum((self.n_tied > 0).astype(np.float64)) > 0


@lru_cache(maxsize=4096)
def _log_all_missed(n: int, r: int, k: int) -> float:
    """log P(none of r relevant items among n is in the top k) = log C(n-r, k)/C(n, k), as the
    sum of log1p(-r/(n-t)) for t < k: exact to rounding, where a difference of log-gammas of
    large galleries loses six digits to cancellation (and needs scipy.special)."""
    return math.fsum(math.log1p(-r / (n - t)) for t in range(k))


def hit_rate(q: QueryRanks, k: int) -> tuple[np.ndarray, np.ndarray]:
    """1 when any relevant item is in the top k (CLIP papers' Recall@k); chance
    1 - C(N-r, k)/C(N, k)."""
    pairs = zip(q.gallery_size.tolist(), q.n_relevant().tolist(), strict=True)
    chance = np.array(
        [-math.expm1(_log_all_missed(n, r, k)) if k <= n - r else 1.0 for n, r in pairs],
        dtype=np.float64,
    )
    return (q.best_rank() <= k).astype(np.float64), chance


def true_recall(q: QueryRanks, k: int) -> tuple[np.ndarray, np.ndarray]:
    """|relevant in the top k| / |relevant|; chance min(k, N)/N."""
    found = q.per_query_sum((q.ranks <= k).astype(np.float64))
    n = q.gallery_size.astype(np.float64)
    return found / q.n_relevant(), np.minimum(k, n) / n


def average_recall(q: QueryRanks, ks: tuple[int, ...] = (1, 5, 10, 20)) -> tuple:
    """AR: the mean of hit-rate Recall@k over `ks`, per query."""
    parts = [hit_rate(q, k) for k in ks]
    return np.mean([p[0] for p in parts], axis=0), np.mean([p[1] for p in parts], axis=0)


@lru_cache(maxsize=4096)
def _chance_reciprocal_min(n: int, r: int) -> float:
    """E[1/min] of the positions of r relevant items placed uniformly among n.

    P(min >= j) is the product of 1 - r/(n-t+1) for t < j (the first j-1 positions all
    missed), and P(min = j) = P(min >= j) * r/(n-j+1): sums of log1p and products, with no
    difference of nearly equal terms.
    """
    j = np.arange(1, n - r + 2, dtype=np.float64)
    log_at_least = np.concatenate(([0.0], np.cumsum(np.log1p(-r / (n - j[:-1] + 1)))))
    exactly = np.exp(log_at_least) * r / (n - j + 1)
    return float(np.sum(exactly / j))


def reciprocal_rank(q: QueryRanks) -> tuple[np.ndarray, np.ndarray]:
    """1 / rank of the first relevant item (MRR's outcome)."""
    pairs = zip(q.gallery_size.tolist(), q.n_relevant().tolist(), strict=True)
    chance = np.array([_chance_reciprocal_min(n, r) for n, r in pairs])
    return 1.0 / q.best_rank(), chance


def first_rank(q: QueryRanks) -> tuple[np.ndarray, np.ndarray]:
    """Rank of the first relevant item (mean/median rank); chance (N+1)/(r+1) (its mean)."""
    return q.best_rank().astype(np.float64), (q.gallery_size + 1) / (q.n_relevant() + 1)


def _discount_sum(k: int) -> np.ndarray:
    return np.cumsum(1.0 / np.log2(np.arange(2, k + 2)))


def ndcg(q: QueryRanks, k: int) -> tuple[np.ndarray, np.ndarray]:
    """nDCG@k with linear gain (the graded relevance) and 1/log2(rank+1) discount, as
    trec_eval's ndcg_cut; the ideal list holds the query's judged relevant items."""
    gains = np.where(q.ranks <= k, q.relevance / np.log2(q.ranks + 1.0), 0.0)
    dcg = q.per_query_sum(gains)
    ideal = np.zeros(q.n_queries)
    for query in range(q.n_queries):
        grades = np.sort(q.relevance[q.indptr[query] : q.indptr[query + 1]])[::-1][:k]
        ideal[query] = np.sum(grades / np.log2(np.arange(2, len(grades) + 2)))
    cut = np.minimum(k, q.gallery_size)
    mean_discount = _discount_sum(int(cut.max(initial=1)))[cut - 1] / q.gallery_size
    chance = q.per_query_sum(q.relevance) * mean_discount / ideal
    return dcg / ideal, chance


def average_precision(q: QueryRanks, k: int | None) -> tuple[np.ndarray, np.ndarray]:
    """INQUIRE's AP@k: sum of precision at each relevant rank <= k, over min(#relevant, k);
    k None = the whole list (plain AP)."""
    cut = q.gallery_size if k is None else np.full(q.n_queries, k)
    owner = q.owner()
    # relevant items ranked at or above each relevant item (itself included)
    above = np.zeros(len(q.ranks))
    for query in range(q.n_queries):
        lo, hi = q.indptr[query], q.indptr[query + 1]
        own = q.ranks[lo:hi]
        above[lo:hi] = np.count_nonzero(own[None, :] <= own[:, None], axis=1)
    inside = q.ranks <= cut[owner]
    precision = np.where(inside, above / q.ranks, 0.0)
    r = q.n_relevant().astype(np.float64)
    denominator = np.minimum(r, cut)
    n = q.gallery_size.astype(np.float64)
    kk = np.minimum(cut, n).astype(np.float64)
    harmonic = np.array([math.fsum(1.0 / np.arange(1, int(x) + 1)) for x in kk])
    ratio = np.where(n > 1, (r - 1) / np.maximum(n - 1, 1), 0.0)
    chance = r / (n * denominator) * (harmonic + ratio * (kk - harmonic))
    return q.per_query_sum(precision) / denominator, chance
