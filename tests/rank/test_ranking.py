"""Exact ranks against a brute-force full sort, on data full of exact duplicates and ties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlbench.rank.exact import (
    Relevance,
    candidate_ranks,
    class_prototypes,
    exact_ranks,
    first_occurrences,
    pooled_candidate_ranks,
)


def tied_vectors(rng: np.random.Generator, n: int, d: int = 4) -> np.ndarray:
    """Small-integer vectors: dot products are exact, so ties and duplicates are real."""
    vectors = rng.integers(-1, 2, size=(n, d)).astype(np.float32)
    vectors[: n // 4] = vectors[n // 4 : 2 * (n // 4)]  # exact duplicate rows
    return vectors


def brute_rank(scores: np.ndarray, item: int, policy: str) -> int:
    """1-based position of `item` in a full stable sort of the row under the tie policy."""
    positions = np.arange(len(scores))
    if policy == "index":
        order = np.argsort(-scores, kind="stable")
    elif policy == "optimistic":
        order = np.lexsort((positions, positions != item, -scores))
    else:
        order = np.lexsort((positions, positions == item, -scores))
    return int(np.flatnonzero(order == item)[0]) + 1


def random_relevance(rng: np.random.Generator, n_queries: int, n_gallery: int, most: int):
    return [
        sorted(rng.choice(n_gallery, size=rng.integers(1, most + 1), replace=False).tolist())
        for _ in range(n_queries)
    ]


@pytest.mark.parametrize("policy", ["index", "optimistic", "pessimistic"])
@pytest.mark.parametrize("most", [1, 5, 20])
def test_exact_ranks_match_a_full_sort(policy: str, most: int) -> None:
    rng = np.random.default_rng(most)
    queries, gallery = tied_vectors(rng, 40), tied_vectors(rng, 60)
    lists = random_relevance(rng, 40, 60, most)
    result = exact_ranks(queries, gallery, Relevance.from_lists(lists), policy, block_mb=1)
    scores = queries @ gallery.T
    expected = [brute_rank(scores[q], i, policy) for q, items in enumerate(lists) for i in items]
    expected_ties = [
        int(np.count_nonzero(scores[q] == scores[q, i])) - 1
        for q, items in enumerate(lists)
        for i in items
    ]
    assert result.ranks.tolist() == expected
    assert result.n_tied.tolist() == expected_ties
    assert np.all(result.gallery_size == 60)


def test_blocks_do_not_change_ranks() -> None:
    rng = np.random.default_rng(7)
    queries, gallery = tied_vectors(rng, 300, 6), tied_vectors(rng, 5000, 6)
    relevance = Relevance.from_lists(random_relevance(rng, 300, 5000, 3))
    whole = exact_ranks(queries, gallery, relevance, block_mb=1024)
    tiny = exact_ranks(queries, gallery, relevance, block_mb=1)  # ~40 rows per block
    assert np.array_equal(whole.ranks, tiny.ranks)


@pytest.mark.parametrize("policy", ["index", "optimistic", "pessimistic"])
def test_candidate_ranks_follow_the_candidate_order(policy: str) -> None:
    rng = np.random.default_rng(3)
    queries, gallery = tied_vectors(rng, 30), tied_vectors(rng, 50)
    candidates = [rng.permutation(50)[: rng.integers(5, 20)].tolist() for _ in range(30)]
    relevant = [sorted(rng.choice(len(c), size=2, replace=False).tolist()) for c in candidates]
    result = candidate_ranks(
        queries,
        gallery,
        Relevance.from_lists(candidates),
        Relevance.from_lists(relevant),
        policy,
        block_mb=1,
    )
    expected = []
    for q, (cands, rel) in enumerate(zip(candidates, relevant, strict=True)):
        row = gallery[cands] @ queries[q]
        expected += [brute_rank(row, i, policy) for i in rel]
    assert result.ranks.tolist() == expected
    assert result.gallery_size.tolist() == [len(c) for c in candidates for _ in range(2)]


def test_pooled_ranks_max_pool_every_entry() -> None:
    """Groups score the max of their entries; ties follow the query's group order."""
    queries = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    gallery = np.array([[0.5, 0], [0.9, 0], [0.9, 0], [0.1, 1], [0.2, 0]], dtype=np.float32)
    # entries 0,1 -> group A; 2 -> B; 3 -> C; 4 -> D (not a candidate group: ignored)
    entries = [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4]]
    slots_by_order = {"A": 0, "B": 1, "C": 2}
    entry_groups = ["A", "A", "B", "C", "D"]
    slots = [[slots_by_order.get(g, -1) for g in entry_groups]] * 2
    orders = [[0, 1, 2], [0, 1, 2]]
    result = pooled_candidate_ranks(
        queries,
        gallery,
        Relevance.from_lists(entries),
        Relevance.from_lists(slots),
        Relevance.from_lists(orders),
        Relevance.from_lists([[1], [2]]),  # query 0: true group B; query 1: true group C
    )
    # query 0: A = max(0.5, 0.9) = 0.9 ties B = 0.9; A first in order -> B ranks 2
    # query 1: C = 1.0 is the only non-zero -> rank 1
    assert result.ranks.tolist() == [2, 1]
    assert result.n_tied.tolist() == [1, 0]
    assert result.gallery_size.tolist() == [3, 3]


def test_class_prototypes_are_renormalised_means_in_first_seen_order() -> None:
    vectors = np.array([[3, 4], [0, 2], [1, 0], [0, 5]], dtype=np.float32)
    names, prototypes = class_prototypes(vectors, np.array(["b", "a", "b", "a"], dtype=object))
    assert names.tolist() == ["b", "a"]
    mean_b = (np.array([0.6, 0.8]) + np.array([1.0, 0.0])) / 2
    np.testing.assert_allclose(prototypes[0], mean_b / np.linalg.norm(mean_b), rtol=1e-6)
    np.testing.assert_allclose(prototypes[1], [0.0, 1.0])


shapes = st.tuples(st.integers(1, 12), st.integers(1, 25), st.integers(0, 10_000))


@settings(max_examples=40, deadline=None)
@given(shapes, st.integers(1, 30))
def test_recall_is_monotone_in_k_and_total_at_n(shape, k) -> None:
    n_queries, n_gallery, seed = shape
    rng = np.random.default_rng(seed)
    queries, gallery = tied_vectors(rng, n_queries, 3), tied_vectors(rng, n_gallery, 3)
    lists = random_relevance(rng, n_queries, n_gallery, 1)
    best = exact_ranks(queries, gallery, Relevance.from_lists(lists)).ranks
    assert np.mean(best <= k) <= np.mean(best <= k + 1)
    assert np.mean(best <= n_gallery) == 1.0


@settings(max_examples=40, deadline=None)
@given(shapes, st.sampled_from(["optimistic", "pessimistic"]))
def test_gallery_permutation_leaves_symmetric_policies_unchanged(shape, policy) -> None:
    n_queries, n_gallery, seed = shape
    rng = np.random.default_rng(seed)
    queries, gallery = tied_vectors(rng, n_queries, 3), tied_vectors(rng, n_gallery, 3)
    lists = random_relevance(rng, n_queries, n_gallery, min(3, n_gallery))
    before = exact_ranks(queries, gallery, Relevance.from_lists(lists), policy).ranks
    perm = rng.permutation(n_gallery)
    new_pos = np.argsort(perm)
    moved = [sorted(new_pos[items].tolist()) for items in lists]
    after = exact_ranks(queries, gallery[perm], Relevance.from_lists(moved), policy).ranks
    old = {
        (q, i): r
        for (q, i), r in zip(
            ((q, i) for q, it in enumerate(lists) for i in it), before, strict=True
        )
    }
    new = {
        (q, perm[i]): r
        for (q, i), r in zip(((q, i) for q, it in enumerate(moved) for i in it), after, strict=True)
    }
    assert old == new


@settings(max_examples=40, deadline=None)
@given(shapes)
def test_candidate_ranks_never_exceed_the_candidate_count(shape) -> None:
    n_queries, n_gallery, seed = shape
    rng = np.random.default_rng(seed)
    queries, gallery = tied_vectors(rng, n_queries, 3), tied_vectors(rng, n_gallery, 3)
    candidates = [
        rng.permutation(n_gallery)[: rng.integers(1, n_gallery + 1)].tolist()
        for _ in range(n_queries)
    ]
    relevant = [[int(rng.integers(len(c)))] for c in candidates]
    for policy in ("index", "optimistic", "pessimistic"):
        result = candidate_ranks(
            queries,
            gallery,
            Relevance.from_lists(candidates),
            Relevance.from_lists(relevant),
            policy,
        )
        assert np.all(result.ranks >= 1)
        assert np.all(result.ranks <= [len(c) for c in candidates])


def test_copies_of_a_gallery_row_always_tie() -> None:
    """A matrix product may score bitwise-equal rows differently by position; copies must tie
    (in the full gallery, in candidate lists and when pooled) and follow the index policy."""
    rng = np.random.default_rng(3)
    gallery = rng.standard_normal((55, 64)).astype(np.float32)
    gallery /= np.linalg.norm(gallery, axis=1, keepdims=True)
    gallery[51] = gallery[52] = gallery[45]
    queries = rng.standard_normal((11, 64)).astype(np.float32)
    result = exact_ranks(queries, gallery, Relevance.from_lists([[52]] * 11))
    assert result.n_tied.tolist() == [2] * 11
    # Index policy: the two earlier copies (45, 51) come first; others by a float64 oracle.
    exact = queries.astype(np.float64) @ gallery.astype(np.float64).T
    others = np.delete(exact, [45, 51, 52], axis=1)
    higher = (others > exact[:, [45]]).sum(axis=1)
    assert result.ranks.tolist() == (1 + higher + 2).tolist()
    listed = [45, 3, 52, 7, 51]
    in_lists = candidate_ranks(
        queries, gallery, Relevance.from_lists([listed] * 11), Relevance.from_lists([[4]] * 11)
    )
    assert in_lists.n_tied.tolist() == [2] * 11
    assert first_occurrences(gallery).tolist() == [*range(51), 45, 45, 53, 54]
