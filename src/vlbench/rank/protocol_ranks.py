"""From embeddings plus judgements, candidate lists and groups to the per-pair ranks table.

Works on protocol-neutral inputs (query/gallery ids and vectors, `query_id, item_id, relevance`
judgements), so the workflow and `vlbench score` share it. Protocols (see vlbench.metrics.specs):

- ``paired``, ``multi_positive``, ``rerank``: every judged-relevant gallery item is ranked among
  the whole gallery, or among the query's candidate list when one is given;
- ``taxon_candidates``: candidate entries are pooled by gallery group (max score) and the query's
  own group is ranked among its candidate groups;
- ``zeroshot``: gallery vectors are pooled by group into class prototypes and the query's group
  is ranked among all classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from vlbench.errors import VlbenchError
from vlbench.protocols import Protocol
from vlbench.rank.exact import (
    Relevance,
    TiePolicy,
    candidate_ranks,
    class_prototypes,
    exact_ranks,
    pooled_candidate_ranks,
)

RANKS_COLUMNS = {
    "query_id": pl.String,
    "item_id": pl.String,
    "relevance": pl.Int32,
    "rank": pl.Int64,
    "n_tied": pl.Int64,
    "gallery_size": pl.Int64,
    "query_group": pl.String,
}


@dataclass(frozen=True)
class Side:
    """One side of a retrieval task: vectors, their ids and optional groups, in the same order."""

    vectors: np.ndarray
    ids: np.ndarray
    groups: np.ndarray | None = None
    name: str = "items"

    def __post_init__(self) -> None:
        if self.vectors.ndim != 2 or len(self.vectors) != len(self.ids):
            raise VlbenchError(
                f"{self.name}: {self.vectors.shape} vectors do not match {len(self.ids)} ids"
            )
        if len(set(self.ids.tolist())) != len(self.ids):
            raise VlbenchError(f"{self.name}: ids are not unique")
        if self.groups is not None and len(self.groups) != len(self.ids):
            raise VlbenchError(f"{self.name}: {len(self.groups)} groups for {len(self.ids)} ids")

    def require_groups(self, purpose: str) -> np.ndarray:
        """The groups, or an error naming what needs them."""
        if self.groups is None or any(group is None for group in self.groups):
            raise VlbenchError(f"{self.name}: {purpose} needs a group for every row")
        return self.groups


def normalise_rows(
    vectors: np.ndarray, where: str = "embeddings", ids: Sequence[Any] | None = None
) -> np.ndarray:
    """float32 rows scaled to unit L2 norm (rows already normalised stay bit-identical).

    A NaN, infinite or all-zero row is an error naming `where` (the file) and the first such
    row (and its id, when `ids` are given).
    """
    matrix = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1)
    for bad, what in (
        (~np.isfinite(matrix).all(axis=1), "NaN or infinite"),
        (norms == 0, "all zeros"),
    ):
        rows = np.flatnonzero(bad)
        if len(rows):
            row = int(rows[0])
            named = f" (id {ids[row]!r})" if ids is not None else ""
            more = f"; {len(rows)} such rows" if len(rows) > 1 else ""
            raise VlbenchError(f"{where}: row {row}{named} is {what}{more}")
    if np.allclose(norms, 1.0, atol=1e-4):
        return matrix
    return matrix / norms[:, None]


def _judged_lists(
    judgements: pl.DataFrame, queries: Side, gallery: Side
) -> tuple[list[dict[int, int]], int]:
    """Per query: relevant gallery position -> relevance (> 0 only), checking every id."""
    query_pos = {item: pos for pos, item in enumerate(queries.ids.tolist())}
    gallery_pos = {item: pos for pos, item in enumerate(gallery.ids.tolist())}
    relevant: list[dict[int, int]] = [{} for _ in range(len(queries.ids))]
    for query, item, grade in judgements.select("query_id", "item_id", "relevance").iter_rows():
        if query not in query_pos:
            raise VlbenchError(f"judgements: query_id {query!r} is not among the {queries.name}")
        if item not in gallery_pos:
            raise VlbenchError(f"judgements: item_id {item!r} is not among the {gallery.name}")
        if grade is not None and grade > 0:
            slot = relevant[query_pos[query]]
            slot[gallery_pos[item]] = max(slot.get(gallery_pos[item], 0), int(grade))
    return relevant, len(judgements)


def _candidate_lists(
    candidates: pl.DataFrame, queries: Side, gallery: Side
) -> list[list[int] | None]:
    """Per query: its candidate gallery positions in list order (None: no row for it)."""
    query_pos = {item: pos for pos, item in enumerate(queries.ids.tolist())}
    gallery_pos = {item: pos for pos, item in enumerate(gallery.ids.tolist())}
    lists: list[list[int] | None] = [None] * len(queries.ids)
    for query, ids in candidates.select("query_id", "candidate_ids").iter_rows():
        if query not in query_pos:
            raise VlbenchError(f"candidates: query_id {query!r} is not among the {queries.name}")
        if lists[query_pos[query]] is not None:
            raise VlbenchError(f"candidates: query_id {query!r} appears twice")
        positions = []
        for item in ids or []:
            if item not in gallery_pos:
                raise VlbenchError(
                    f"candidates: candidate {item!r} of query {query!r} is not among the "
                    f"{gallery.name}"
                )
            positions.append(gallery_pos[item])
        if len(set(positions)) != len(positions):
            raise VlbenchError(f"candidates: query {query!r} lists a candidate twice")
        lists[query_pos[query]] = positions
    return lists


def _table(
    query_ids: list[str],
    item_ids: list[str],
    grades: list[int],
    result,
    query_groups: list[str | None],
) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "query_id": query_ids,
            "item_id": item_ids,
            "relevance": grades,
            "rank": result.ranks,
            "n_tied": result.n_tied,
            "gallery_size": result.gallery_size,
            "query_group": query_groups,
        },
        schema=RANKS_COLUMNS,
    )


def _group_of(queries: Side, q: int) -> str | None:
    return None if queries.groups is None else queries.groups[q]


def rank_judged(
    queries: Side,
    gallery: Side,
    judgements: pl.DataFrame,
    candidates: pl.DataFrame | None,
    tie_policy: TiePolicy,
    block_mb: int,
) -> pl.DataFrame:
    """Ranks of every judged-relevant item, in the whole gallery or the query's candidates."""
    relevant, _ = _judged_lists(judgements, queries, gallery)
    lists = _candidate_lists(candidates, queries, gallery) if candidates is not None else None
    kept, positions, grades, items, candidate_rows = [], [], [], [], []
    for q, judged in enumerate(relevant):
        if lists is not None:
            if lists[q] is None:
                if judged:
                    raise VlbenchError(
                        f"candidates: no candidate list for query {queries.ids[q]!r}"
                    )
                continue
            in_list = {pos: at for at, pos in enumerate(lists[q])}
            judged = {pos: grade for pos, grade in judged.items() if pos in in_list}
        if not judged:
            continue
        order = sorted(judged)
        kept.append(q)
        items.append([gallery.ids[pos] for pos in order])
        grades.append([judged[pos] for pos in order])
        positions.append([in_list[pos] for pos in order] if lists is not None else order)
        if lists is not None:
            candidate_rows.append(lists[q])
    if not kept:
        raise VlbenchError(f"judgements: no query among the {queries.name} has a relevant item")
    relevance = Relevance.from_lists(positions)
    query_vectors = queries.vectors[kept]
    if lists is None:
        result = exact_ranks(query_vectors, gallery.vectors, relevance, tie_policy, block_mb)
    else:
        result = candidate_ranks(
            query_vectors,
            gallery.vectors,
            Relevance.from_lists(candidate_rows),
            relevance,
            tie_policy,
            block_mb,
        )
    owners = [kept[q] for q in relevance.query_of_each_item()]
    return _table(
        [queries.ids[q] for q in owners],
        [item for row in items for item in row],
        [grade for row in grades for grade in row],
        result,
        [_group_of(queries, q) for q in owners],
    )


def rank_pooled_groups(
    queries: Side,
    gallery: Side,
    candidates: pl.DataFrame | None,
    tie_policy: TiePolicy,
    block_mb: int,
) -> pl.DataFrame:
    """Taxon-level ranks: each candidate group scores the max over its candidate entries."""
    truth = queries.require_groups("ranking taxa among candidates")
    entry_group = gallery.require_groups("ranking taxa among candidates")
    everything = list(range(len(gallery.ids)))
    lists = (
        _candidate_lists(candidates, queries, gallery)
        if candidates is not None
        else [everything] * len(queries.ids)
    )
    given_orders: dict[str, list[str] | None] = {}
    if candidates is not None and "candidate_groups" in candidates.columns:
        given_orders = dict(candidates.select("query_id", "candidate_groups").iter_rows())
    entries, entry_slots, orders, relevant = [], [], [], []
    for q, positions in enumerate(lists):
        query_id = queries.ids[q]
        if positions is None:
            raise VlbenchError(f"candidates: no candidate list for query {query_id!r}")
        order = given_orders.get(query_id)
        if order is None:
            order = list(dict.fromkeys(entry_group[pos] for pos in positions))
        slot_of = {group: at for at, group in enumerate(order)}
        if len(slot_of) != len(order):
            raise VlbenchError(f"candidates: query {query_id!r} lists a candidate group twice")
        if truth[q] not in slot_of:
            raise VlbenchError(
                f"candidates: the group {truth[q]!r} of query {query_id!r} is not among its "
                "candidate groups"
            )
        entries.append(positions)
        entry_slots.append([slot_of.get(entry_group[pos], -1) for pos in positions])
        orders.append(list(range(len(order))))
        relevant.append([slot_of[truth[q]]])
    result = pooled_candidate_ranks(
        queries.vectors,
        gallery.vectors,
        Relevance.from_lists(entries),
        Relevance.from_lists(entry_slots),
        Relevance.from_lists(orders),
        Relevance.from_lists(relevant),
        tie_policy,
        block_mb,
    )
    n = len(queries.ids)
    return _table(list(queries.ids), list(truth), [1] * n, result, list(truth))


def rank_classes(
    queries: Side, gallery: Side, tie_policy: TiePolicy, block_mb: int
) -> tuple[pl.DataFrame, list[str]]:
    """Zero-shot ranks of each query's true class among all class prototypes (+ class order)."""
    truth = queries.require_groups("zero-shot classification")
    names, prototypes = class_prototypes(
        gallery.vectors, gallery.require_groups("zero-shot classification")
    )
    class_pos = {name: pos for pos, name in enumerate(names.tolist())}
    missing = sorted({group for group in truth if group not in class_pos})
    if missing:
        raise VlbenchError(
            f"{queries.name}: class {missing[0]!r} has no prompt among the {gallery.name}"
        )
    relevance = Relevance.from_lists([[class_pos[group]] for group in truth])
    result = exact_ranks(queries.vectors, prototypes, relevance, tie_policy, block_mb)
    n = len(queries.ids)
    return _table(list(queries.ids), list(truth), [1] * n, result, list(truth)), names.tolist()


# The registry's `Protocol.ranking` kinds that `rank_protocol` computes.
RANKINGS = ("judged", "pooled_groups", "classes")


def rank_protocol(
    protocol: Protocol,
    queries: Side,
    gallery: Side,
    judgements: pl.DataFrame | None,
    candidates: pl.DataFrame | None = None,
    tie_policy: TiePolicy = "index",
    block_mb: int = 1024,
) -> pl.DataFrame:
    """The ranks table of one direction of a benchmark under `protocol`."""
    if queries.vectors.shape[1] != gallery.vectors.shape[1]:
        raise VlbenchError(
            f"{queries.name} have dimension {queries.vectors.shape[1]} but {gallery.name} "
            f"{gallery.vectors.shape[1]}"
        )
    if protocol.candidates_required and candidates is None:
        raise VlbenchError(f"protocol {protocol.name!r} needs candidate lists")
    if protocol.ranking == "pooled_groups":
        return rank_pooled_groups(queries, gallery, candidates, tie_policy, block_mb)
    if protocol.ranking == "classes":
        return rank_classes(queries, gallery, tie_policy, block_mb)[0]
    if protocol.ranking != "judged":
        raise VlbenchError(f"protocol {protocol.name!r}: unknown ranking {protocol.ranking!r}")
    if judgements is None:
        raise VlbenchError(f"protocol {protocol.name!r} needs relevance judgements")
    return rank_judged(queries, gallery, judgements, candidates, tie_policy, block_mb)
