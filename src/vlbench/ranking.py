"""Exact 1-based ranks of relevant gallery items, computed in bounded blocks of the score matrix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

TiePolicy = Literal["index", "optimistic", "pessimistic"]
TIE_POLICIES: tuple[str, ...] = ("index", "optimistic", "pessimistic")


@dataclass(frozen=True)
class Relevance:
    """Relevant gallery positions, CSR: query q owns indices[indptr[q]:indptr[q+1]]."""

    indptr: np.ndarray
    indices: np.ndarray

    @classmethod
    def from_lists(cls, lists: list[list[int]] | list[np.ndarray]) -> Relevance:
        """Build from one list of gallery positions per query."""
        lengths = np.array([len(items) for items in lists], dtype=np.int64)
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        indices = (
            np.concatenate([np.asarray(items, dtype=np.int64) for items in lists])
            if len(lists) and indptr[-1]
            else np.zeros(0, dtype=np.int64)
        )
        return cls(indptr, indices)

    @property
    def n_queries(self) -> int:
        return len(self.indptr) - 1

    def query_of_each_item(self) -> np.ndarray:
        """The query number owning each entry of `indices`."""
        return np.repeat(np.arange(self.n_queries), np.diff(self.indptr))


@dataclass(frozen=True)
class RankResult:
    """Per relevant (query, item) pair: its rank and how many other items had exactly its score."""

    ranks: np.ndarray
    n_tied: np.ndarray
    gallery_size: int


def _rows_per_block(n_gallery: int, max_relevant: int, block_mb: int) -> int:
    """Queries per block so that the scores plus the per-pair comparison fit in `block_mb` MiB."""
    bytes_per_query = n_gallery * (4 + 2 * max(1, max_relevant))
    return max(1, (block_mb << 20) // max(1, bytes_per_query))


def exact_ranks(
    queries: np.ndarray,
    gallery: np.ndarray,
    relevance: Relevance,
    tie_policy: TiePolicy = "index",
    block_mb: int = 1024,
) -> RankResult:
    """Rank every relevant item of every query against the whole gallery, with no top-k cap.

    rank = 1 + #(items scoring higher) + tied items counted by the policy:
    ``index`` counts tied items earlier in the gallery (the reference scripts' argsort order),
    ``optimistic`` none, ``pessimistic`` all.
    """
    if tie_policy not in TIE_POLICIES:
        raise ValueError(f"unknown tie policy {tie_policy!r}; choose one of {TIE_POLICIES}")
    if queries.shape[1] != gallery.shape[1]:
        raise ValueError(f"dimension mismatch: queries {queries.shape}, gallery {gallery.shape}")
    n_gallery = gallery.shape[0]
    ranks = np.zeros(len(relevance.indices), dtype=np.int64)
    n_tied = np.zeros(len(relevance.indices), dtype=np.int64)
    counts = np.diff(relevance.indptr)
    step = _rows_per_block(n_gallery, int(counts.max(initial=1)), block_mb)
    positions = np.arange(n_gallery)
    gallery_t = np.ascontiguousarray(gallery.T)
    for start in range(0, relevance.n_queries, step):
        stop = min(start + step, relevance.n_queries)
        scores = queries[start:stop] @ gallery_t
        lo, hi = relevance.indptr[start], relevance.indptr[stop]
        items = relevance.indices[lo:hi]
        rows = np.repeat(np.arange(stop - start), counts[start:stop])
        pair_scores = scores[rows]
        own = pair_scores[np.arange(len(items)), items][:, None]
        higher = (pair_scores > own).sum(axis=1)
        equal = pair_scores == own
        tied_total = equal.sum(axis=1) - 1
        if tie_policy == "index":
            tied_before = (equal & (positions[None, :] < items[:, None])).sum(axis=1)
        elif tie_policy == "optimistic":
            tied_before = np.zeros_like(higher)
        else:
            tied_before = tied_total
        ranks[lo:hi] = 1 + higher + tied_before
        n_tied[lo:hi] = tied_total
    return RankResult(ranks, n_tied, n_gallery)
