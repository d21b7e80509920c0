"""Exact 1-based ranks of relevant gallery items, computed in bounded blocks of the score matrix.

Three gallery shapes share one counting core (`ranks_in_rows`):

- `exact_ranks`: every query against the whole gallery, streamed in blocks of query rows;
- `candidate_ranks`: every query against its own ordered candidate list;
- `pooled_candidate_ranks`: candidates grouped (e.g. corpus entries by taxon), each group scoring
  the max over its entries, groups ranked in the query's own group order.

rank = 1 + #(items scoring higher) + the tied items the policy puts first:
``index`` counts tied items earlier in the gallery or candidate list (the reference scripts'
stable argsort order), ``optimistic`` none, ``pessimistic`` all.

Identical gallery rows (a duplicated caption, a text two taxa share) always tie: a BLAS matrix
product can score two bitwise-equal rows differently in the last bit, depending on where they sit
in the matrix, so every copy takes the score of its first occurrence (`first_occurrences`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

TiePolicy = Literal["index", "optimistic", "pessimistic"]
TIE_POLICIES: tuple[str, ...] = ("index", "optimistic", "pessimistic")
# Above this many relevant items per query, sorting a row beats one comparison pass per item.
_SORT_THRESHOLD = 12
_CACHE_BYTES = 1 << 20


@dataclass(frozen=True)
class Relevance:
    """Relevant positions, CSR: query q owns indices[indptr[q]:indptr[q+1]]."""

    indptr: np.ndarray
    indices: np.ndarray

    @classmethod
    def from_lists(cls, lists: list[list[int]] | list[np.ndarray]) -> Relevance:
        """Build from one list of positions per query."""
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

    def counts(self) -> np.ndarray:
        """Number of positions per query."""
        return np.diff(self.indptr)

    def query_of_each_item(self) -> np.ndarray:
        """The query number owning each entry of `indices`."""
        return np.repeat(np.arange(self.n_queries), self.counts())

    def padded(self, start: int, stop: int) -> np.ndarray:
        """Positions of queries start..stop as a (rows, max count) array padded with -1."""
        counts = self.counts()[start:stop]
        width = max(1, int(counts.max(initial=0)))
        out = np.full((stop - start, width), -1, dtype=np.int64)
        lo = self.indptr[start]
        rows = np.repeat(np.arange(stop - start), counts)
        cols = np.arange(len(rows)) - np.repeat(self.indptr[start:stop] - lo, counts)
        out[rows, cols] = self.indices[lo : self.indptr[stop]]
        return out


@dataclass(frozen=True)
class RankResult:
    """Per relevant (query, item) pair, in `Relevance.indices` order: rank, ties, list length."""

    ranks: np.ndarray
    n_tied: np.ndarray
    gallery_size: np.ndarray


def check_tie_policy(tie_policy: str) -> None:
    """Reject an unknown tie policy."""
    if tie_policy not in TIE_POLICIES:
        raise ValueError(f"unknown tie policy {tie_policy!r}; choose one of {TIE_POLICIES}")


def _count(mask: np.ndarray) -> np.ndarray:
    """True entries per row of a boolean matrix (a byte sum: faster than count_nonzero)."""
    return mask.view(np.uint8).sum(axis=1, dtype=np.int64)


def ranks_in_rows(
    scores: np.ndarray, own_positions: np.ndarray, tie_policy: TiePolicy
) -> tuple[np.ndarray, np.ndarray]:
    """Ranks and tie counts of the items at `own_positions` (-1 = padding) within their rows.

    `scores` is (rows, width) with NaN marking padding columns, which never count. The own score
    is read from `scores` itself, so the comparison is exact even where a separately computed
    dot product would differ in the last bit. Returns two (rows, width_own) int64 arrays.
    """
    rows = np.arange(scores.shape[0])[:, None]
    valid = own_positions >= 0
    own = np.where(valid, scores[rows, np.where(valid, own_positions, 0)], np.nan)
    higher = np.zeros(own.shape, dtype=np.int64)
    at_least = np.zeros(own.shape, dtype=np.int64)
    if own.shape[1] <= _SORT_THRESHOLD:
        # Rows in cache-sized chunks, so the second comparison re-reads scores from cache.
        chunk = max(1, _CACHE_BYTES // max(1, 4 * scores.shape[1]))
        for lo in range(0, scores.shape[0], chunk):
            part = scores[lo : lo + chunk]
            for slot in range(own.shape[1]):
                column = own[lo : lo + chunk, slot : slot + 1]
                higher[lo : lo + chunk, slot] = _count(part > column)
                at_least[lo : lo + chunk, slot] = _count(part >= column)
    else:
        ordered = np.sort(scores, axis=1)  # NaN sorts last
        width = np.count_nonzero(~np.isnan(ordered), axis=1)
        for row in range(scores.shape[0]):
            finite = ordered[row, : width[row]]
            higher[row] = width[row] - np.searchsorted(finite, own[row], side="right")
            at_least[row] = width[row] - np.searchsorted(finite, own[row], side="left")
    n_tied = np.maximum(at_least - higher - 1, 0)
    if tie_policy == "optimistic":
        before = np.zeros_like(higher)
    elif tie_policy == "pessimistic":
        before = n_tied
    else:
        before = np.zeros_like(higher)
        for row, slot in zip(*np.nonzero((n_tied > 0) & valid), strict=True):
            pos = own_positions[row, slot]
            before[row, slot] = np.count_nonzero(scores[row, :pos] == own[row, slot])
    return 1 + higher + before, n_tied


def first_occurrences(matrix: np.ndarray) -> np.ndarray:
    """For each row, the index of the first row with the same bytes (itself if none before)."""
    rows = np.ascontiguousarray(matrix)
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return first[inverse.ravel()]


def _tie_copies(scores: np.ndarray, first: np.ndarray) -> None:
    """Give every column that copies an earlier gallery row that row's score (in place)."""
    copies = np.nonzero(first != np.arange(len(first)))[0]
    if len(copies):
        scores[:, copies] = scores[:, first[copies]]


def _tie_copies_in_lists(scores: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Per row, give every entry whose key (its gallery row's first occurrence) repeats an
    earlier entry of the row that entry's score."""
    order = np.argsort(keys, axis=1, kind="stable")
    ordered_keys = np.take_along_axis(keys, order, axis=1)
    columns = np.arange(keys.shape[1])[None, :]
    starts = np.ones(keys.shape, dtype=bool)
    starts[:, 1:] = ordered_keys[:, 1:] != ordered_keys[:, :-1]
    leader = np.maximum.accumulate(np.where(starts, columns, 0), axis=1)
    ordered = np.take_along_axis(scores, order, axis=1)
    out = np.empty_like(scores)
    np.put_along_axis(out, order, np.take_along_axis(ordered, leader, axis=1), axis=1)
    return out


def _rows_per_block(width: int, max_relevant: int, block_mb: int, per_row_bytes: int = 0) -> int:
    """Rows per block so the scores and the comparison temporaries fit in `block_mb` MiB."""
    per_element = 5 if max_relevant <= _SORT_THRESHOLD else 9
    bytes_per_row = width * per_element + per_row_bytes
    return max(1, (block_mb << 20) // max(1, bytes_per_row))


def _scatter(out: np.ndarray, relevance: Relevance, start: int, stop: int, block: np.ndarray):
    """Write a padded (rows, width) block back into the flat per-pair array."""
    counts = relevance.counts()[start:stop]
    mask = np.arange(block.shape[1])[None, :] < counts[:, None]
    out[relevance.indptr[start] : relevance.indptr[stop]] = block[mask]


def _ranks_by_block(
    relevance: Relevance,
    step: int,
    tie_policy: TiePolicy,
    block_scores: Callable[[int, int], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Per-pair ranks and tie counts, `step` queries at a time; `block_scores(start, stop)`
    gives those queries' (rows, items) scores, NaN where a row has fewer items."""
    n_pairs = len(relevance.indices)
    ranks = np.zeros(n_pairs, dtype=np.int64)
    n_tied = np.zeros(n_pairs, dtype=np.int64)
    for start in range(0, relevance.n_queries, step):
        stop = min(start + step, relevance.n_queries)
        scores = block_scores(start, stop)
        block_ranks, block_tied = ranks_in_rows(scores, relevance.padded(start, stop), tie_policy)
        del scores
        _scatter(ranks, relevance, start, stop, block_ranks)
        _scatter(n_tied, relevance, start, stop, block_tied)
    return ranks, n_tied


def exact_ranks(
    queries: np.ndarray,
    gallery: np.ndarray,
    relevance: Relevance,
    tie_policy: TiePolicy = "index",
    block_mb: int = 1024,
) -> RankResult:
    """Rank every relevant item of every query against the whole gallery, with no top-k cap.

    Only a block of query rows x the whole gallery is held at a time (at most `block_mb` MiB
    together with the comparison temporaries).
    """
    check_tie_policy(tie_policy)
    if queries.shape[1] != gallery.shape[1]:
        raise ValueError(f"dimension mismatch: queries {queries.shape}, gallery {gallery.shape}")
    max_relevant = int(relevance.counts().max(initial=1))
    step = _rows_per_block(gallery.shape[0], max_relevant, block_mb)
    first = first_occurrences(gallery)

    def block_scores(start: int, stop: int) -> np.ndarray:
        scores = queries[start:stop] @ gallery.T
        _tie_copies(scores, first)
        return scores

    ranks, n_tied = _ranks_by_block(relevance, step, tie_policy, block_scores)
    return RankResult(ranks, n_tied, np.full(len(ranks), gallery.shape[0], dtype=np.int64))


def _candidate_scores(
    queries: np.ndarray,
    gallery: np.ndarray,
    candidates: Relevance,
    start: int,
    stop: int,
    first: np.ndarray,
) -> np.ndarray:
    """(rows, max candidates) scores of queries start..stop on their candidates; NaN padding.

    `first`: the gallery's `first_occurrences`; copies of one row in a list score alike.
    """
    padded = candidates.padded(start, stop)
    vectors = gallery[np.maximum(padded, 0)]
    scores = np.matmul(vectors, queries[start:stop, :, None])[..., 0]
    keys = np.where(padded >= 0, first[np.maximum(padded, 0)], -1)
    scores = _tie_copies_in_lists(scores, keys)
    scores[padded < 0] = np.nan
    return scores


def candidate_ranks(
    queries: np.ndarray,
    gallery: np.ndarray,
    candidates: Relevance,
    relevance: Relevance,
    tie_policy: TiePolicy = "index",
    block_mb: int = 1024,
) -> RankResult:
    """Rank relevant items within each query's own candidate list.

    `candidates` holds gallery positions per query in the list's order; `relevance` holds
    positions *within* that list. ``index`` ties follow the candidate order.
    """
    check_tie_policy(tie_policy)
    width = int(candidates.counts().max(initial=1))
    max_relevant = int(relevance.counts().max(initial=1))
    per_row = width * 4 * gallery.shape[1]
    step = _rows_per_block(width, max_relevant, block_mb, per_row_bytes=per_row)
    first = first_occurrences(gallery)

    def block_scores(start: int, stop: int) -> np.ndarray:
        return _candidate_scores(queries, gallery, candidates, start, stop, first)

    ranks, n_tied = _ranks_by_block(relevance, step, tie_policy, block_scores)
    sizes = np.repeat(candidates.counts(), relevance.counts())
    return RankResult(ranks, n_tied, sizes.astype(np.int64))


def pooled_candidate_ranks(
    queries: np.ndarray,
    gallery: np.ndarray,
    candidates: Relevance,
    candidate_groups: Relevance,
    group_order: Relevance,
    relevance: Relevance,
    tie_policy: TiePolicy = "index",
    block_mb: int = 1024,
) -> RankResult:
    """Rank relevant groups, each scoring the max over its candidate entries.

    `candidate_groups` gives, per candidate entry, its group's position in the query's group
    order (-1: not a candidate group, ignored); `group_order` only fixes each query's group
    count; `relevance` holds positions within the group order. Nothing is truncated before
    pooling; a group without entries scores -inf.
    """
    check_tie_policy(tie_policy)
    width = int(candidates.counts().max(initial=1))
    n_groups = int(group_order.counts().max(initial=1))
    max_relevant = int(relevance.counts().max(initial=1))
    per_row = width * (4 * gallery.shape[1] + 12)
    step = _rows_per_block(n_groups, max_relevant, block_mb, per_row_bytes=per_row)
    first = first_occurrences(gallery)

    def block_scores(start: int, stop: int) -> np.ndarray:
        scores = _candidate_scores(queries, gallery, candidates, start, stop, first)
        groups = candidate_groups.padded(start, stop)
        pooled = np.full((stop - start, n_groups), -np.inf, dtype=scores.dtype)
        rows, cols = np.nonzero(groups >= 0)
        np.maximum.at(pooled, (rows, groups[rows, cols]), scores[rows, cols])
        counts = group_order.counts()[start:stop]
        pooled[np.arange(n_groups)[None, :] >= counts[:, None]] = np.nan
        return pooled

    ranks, n_tied = _ranks_by_block(relevance, step, tie_policy, block_scores)
    sizes = np.repeat(group_order.counts(), relevance.counts())
    return RankResult(ranks, n_tied, sizes.astype(np.int64))


def class_prototypes(vectors: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zero-shot classifiers: per group (first-seen order), the re-normalised mean of its
    L2-normalised vectors. Returns (class names, prototype matrix)."""
    names, first, inverse = np.unique(groups, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank_of = np.empty_like(order)
    rank_of[order] = np.arange(len(order))
    normalised = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sums = np.zeros((len(names), vectors.shape[1]), dtype=np.float64)
    np.add.at(sums, rank_of[inverse.ravel()], normalised)
    means = sums / np.bincount(rank_of[inverse.ravel()])[:, None]
    prototypes = means / np.linalg.norm(means, axis=1, keepdims=True)
    return names[order], prototypes.astype(vectors.dtype)
