"""Few-shot accuracy against BioCLIP's few_shot.py, restated here fold by fold.

The reference (Imageomics/bioclip, src/evaluation/few_shot.py: `split`, `CL2N`, `get_acc` and
the k-shot / fold loops of its main block) is not importable (not on PyPI), so
`reference_fold_accuracies` restates it literally: the global Python `random` seeded with the
fold number, `random.shuffle` of each class's feature list in place (in class insertion order),
the support set stacked with `np.vstack` and its assert, CL2N with `numpy.linalg.norm`, centroids
by reshape and mean, distances of every centroid to every query by broadcasting,
`np.argpartition(..., 1, axis=0)[:1]` and `scipy.stats.mode`. With `fresh=True` it shuffles a
copy of the list instead, as BioCLIP 2's src/evaluation/classification.py does.
"""

from __future__ import annotations

import numpy as np
import pytest
from fewshot_reference import reference_fold_accuracies
from numpy import linalg as LA

from vlbench.errors import VlbenchError
from vlbench.metrics.fewshot import (
    _reference_distance,
    cl2n,
    fewshot_folds,
    nearest_centroid,
)


def unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """float32 rows of unit norm (the reference's features are L2-normalised model outputs)."""
    rows = rng.normal(size=(n, d)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def clustered(rng: np.random.Generator, sizes: list[int], d: int, spread: float = 2.0):
    """Features of classes 0..C-1 with the given sizes, in a shuffled (interleaved) sample order
    so that class order (first appearance) differs from label order."""
    labels = np.repeat(np.arange(len(sizes)), sizes)
    rng.shuffle(labels)
    centres = rng.normal(size=(len(sizes), d))
    rows = (centres[labels] + spread * rng.normal(size=(len(labels), d))).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True), labels.tolist()


def test_fold_by_fold_equal_to_the_reference_with_uneven_and_small_classes() -> None:
    """Six classes of uneven size; one has 5 images (fewer than 6: flagged at k = 1 and k = 5,
    and no query left at k = 5), as the reference logs and keeps it."""
    rng = np.random.default_rng(3)
    features, labels = clustered(rng, [14, 7, 5, 23, 9, 11], d=32)
    ours = fewshot_folds(features, labels, [1, 5], folds=5)
    expected = reference_fold_accuracies(features, labels, [1, 5], 5)
    for result in ours:
        assert list(result.fold_accuracies) == expected[result.shots]
        assert result.mean == np.mean(expected[result.shots])
        assert result.std == np.std(expected[result.shots])
    one, five = ours
    assert one.n_queries == 69 - 6 and five.n_queries == 69 - 30
    assert one.short_classes == ("2",)  # class 2 (5 images) < 1 + 5
    assert set(five.short_classes) == {"1", "2", "4"}  # 7, 5 and 9 images < 5 + 5
    # The folds differ from each other: the shuffles really move.
    assert len(set(one.fold_accuracies)) > 1


@pytest.mark.parametrize(
    "shots", [[1, 5], [5, 1], [1, 5, 10], [3], [2, 10, 1]], ids=lambda s: "-".join(map(str, s))
)
@pytest.mark.parametrize("fresh", [False, True], ids=["in_place", "fresh"])
def test_vectorised_equals_the_reference_on_random_data(shots: list[int], fresh: bool) -> None:
    rng = np.random.default_rng(sum(shots) + 7 * fresh)
    sizes = rng.integers(10, 30, size=int(rng.integers(2, 25))).tolist()
    features, labels = clustered(rng, sizes, d=int(rng.integers(8, 300)), spread=4.0)
    ours = fewshot_folds(features, labels, shots, 4, "fresh" if fresh else "in_place")
    expected = reference_fold_accuracies(features, labels, shots, 4, fresh)
    assert {result.shots: list(result.fold_accuracies) for result in ours} == expected


def test_in_place_k_list_order_matters_and_appending_changes_nothing_before() -> None:
    rng = np.random.default_rng(5)
    features, labels = clustered(rng, [15, 12, 18, 11], d=16, spread=3.0)
    first = {r.shots: r.fold_accuracies for r in fewshot_folds(features, labels, [1, 5], 5)}
    more = {r.shots: r.fold_accuracies for r in fewshot_folds(features, labels, [1, 5, 10], 5)}
    swapped = {r.shots: r.fold_accuracies for r in fewshot_folds(features, labels, [5, 1], 5)}
    assert more[1] == first[1] and more[5] == first[5]
    assert swapped[5] != first[5]  # k = 5 now starts from the dataset order
    fresh = [
        {r.shots: r.fold_accuracies for r in fewshot_folds(features, labels, k, 5, "fresh")}
        for k in ([1, 5], [5, 1])
    ]
    assert fresh[0] == fresh[1]  # fresh folds depend on (k, fold) only
    assert fresh[0][5][0] == swapped[5][0]  # both start fold 0 of k = 5 from the dataset order


def test_exact_ties_go_to_the_first_class_and_are_counted() -> None:
    """Two classes whose support images are identical have identical centroids: every query's
    two nearest distances tie exactly. numpy's scalar introselect (argpartition with kth = 1 over
    a few classes) keeps the first of equal minima, and so do we."""
    rng = np.random.default_rng(8)
    base = unit_rows(rng, 6, 12)
    # Classes a and b: the same image twice each; c: four other images.
    features = np.concatenate([base[[0, 0]], base[[0, 0]], base[2:6]])
    labels = [0, 0, 1, 1, 2, 2, 2, 2]  # targets are class indices, as the reference's
    (result,) = fewshot_folds(features, labels, [1], folds=3)
    expected = reference_fold_accuracies(features, labels, [1], 3)[1]
    assert list(result.fold_accuracies) == expected
    # The query of class a and of class b tie between a and b in every fold.
    assert result.n_tied_queries >= 2 * 3


def test_ties_among_many_classes_pick_the_first_minimum() -> None:
    """With many classes numpy's argpartition may pick any of equal minima (x86-simd-sort);
    ours is the first class in class order, the scalar selection scan: restated here."""
    rng = np.random.default_rng(2)
    images = unit_rows(rng, 40, 6)
    features = np.concatenate([images, images[:10]])  # classes 40.. copy classes 0..9
    labels = [f"c{i:02d}" for i in range(40)] + [f"c{i:02d}" for i in range(40, 50)]
    features = np.concatenate([features, images[:10] + 1e-3])  # one query per copied class
    labels += [f"c{i:02d}" for i in range(40, 50)]
    features = features / np.linalg.norm(features, axis=1, keepdims=True)
    support = np.arange(50)
    queries = np.arange(50, 60)
    predicted, tied = nearest_centroid(features, support, 50, 1, queries)
    support_rows = cl2n(features[support], features[support].mean(axis=0))
    query_rows = cl2n(features[queries], features[support].mean(axis=0))
    for q in range(10):
        distances = _reference_distance(support_rows, query_rows[q][None, :].repeat(50, 0))
        first_minimum = 0
        for c in range(1, 50):
            if distances[c] < distances[first_minimum]:
                first_minimum = c
        assert predicted[q] == first_minimum
        assert tied[q] == (np.count_nonzero(distances == distances[first_minimum]) > 1)
    assert tied.all()  # class q and its copy 40 + q have the same centroid


def test_screened_decisions_recompute_the_reference_distances_bitwise() -> None:
    """CL2N rows do not depend on how the rows are stacked, and the recomputed pair distances
    are the reference's broadcast distance matrix entries, bit for bit."""
    rng = np.random.default_rng(0)
    for d in (7, 512, 768):
        rows = rng.normal(size=(120, d)).astype(np.float32)
        mean = rows[:30].mean(axis=0)
        order = rng.permutation(120)
        stacked = np.asarray([rows[i] for i in order])
        reference = (stacked - mean) / LA.norm(stacked - mean, 2, 1)[:, None]
        ours = cl2n(rows, mean)[order]
        assert np.array_equal(reference.view(np.uint32), ours.view(np.uint32))
        centres = unit_rows(rng, 9, d) * np.float32(0.8)
        full = LA.norm(centres[:, None, :] - reference, 2, axis=-1)
        pick_c, pick_q = rng.integers(0, 9, 300), rng.integers(0, 120, 300)
        pairs = _reference_distance(centres[pick_c], reference[pick_q])
        assert np.array_equal(full[pick_c, pick_q], pairs)


def test_near_ties_are_decided_as_the_reference_decides() -> None:
    """Queries at the float32 midpoint of two images, moved by one ulp in a few coordinates:
    their two distances agree to rounding. The screening cannot tell them apart, so the
    reference's own float32 distances decide (an exact float64 distance decides otherwise in
    many of them), and exact float32 ties go to the first class."""
    rng = np.random.default_rng(4)
    d, n = 64, 50
    disagree_with_float64 = ties = 0
    for _ in range(10):
        a, b = unit_rows(rng, 2, d)
        rows = [a, b]
        for _ in range(n):
            query = ((a + b) / 2).astype(np.float32)
            moved = rng.integers(0, d, 3)
            towards = np.where(rng.integers(0, 2, 3) == 1, np.inf, -np.inf).astype(np.float32)
            query[moved] = np.nextafter(query[moved], towards)
            rows.append(query)
        matrix = np.asarray(rows, dtype=np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        predicted, tied = nearest_centroid(matrix, np.array([0, 1]), 2, 1, np.arange(2, n + 2))
        mean = matrix[[0, 1]].mean(axis=0)
        centres, queries = cl2n(matrix[[0, 1]], mean), cl2n(matrix[2:], mean)
        distance = LA.norm(centres[:, None, :] - queries, 2, axis=-1)
        expected = np.argpartition(distance, 1, axis=0)[0]  # two classes: the scalar selection
        assert predicted.tolist() == expected.tolist()
        assert tied.tolist() == (distance[0] == distance[1]).tolist()
        wide = queries.astype(np.float64)[:, None, :] - centres.astype(np.float64)[None]
        disagree_with_float64 += int(np.sum((wide**2).sum(-1).argmin(1) != expected))
        ties += int(tied.sum())
    assert disagree_with_float64 > 0 and ties > 0


def test_a_k_with_a_class_smaller_than_k_is_not_computable_and_the_others_are() -> None:
    """The reference stops at k = 5 (a class of 3); we record k = 5 as not computable, naming
    the class and its count, and compute k = 1 as the reference does on the list [1]."""
    rng = np.random.default_rng(1)
    features, labels = clustered(rng, [12, 3, 9, 1], d=8)
    with pytest.raises(AssertionError):  # k = 1 runs, k = 5 stops at the support assert
        reference_fold_accuracies(features, labels, [1, 5], 2)
    named = ["oak", "fern", "moss", "lichen"]
    one, five = fewshot_folds(features, [named[label] for label in labels], [1, 5], 2)
    assert five.not_computable.startswith("k=5: 2 class(es) with fewer than 5 images")
    assert "'lichen' (1), 'fern' (3)" in five.not_computable  # smallest first
    assert five.fold_accuracies == () and five.mean is None and five.n_queries == 0
    assert not one.not_computable
    # k = 1 is still computable with the one-image class (its image is support, none queried).
    assert list(one.fold_accuracies) == reference_fold_accuracies(features, labels, [1], 2)[1]


def test_a_k_that_cannot_run_draws_no_shuffles_for_the_ks_after_it() -> None:
    """With in-place shuffles a skipped k leaves the order as the list without it would."""
    rng = np.random.default_rng(2)
    features, labels = clustered(rng, [8, 4, 7], d=8)
    _, two = fewshot_folds(features, labels, [5, 2], 3)
    expected = reference_fold_accuracies(features, labels, [2], 3)[2]
    assert list(two.fold_accuracies) == expected


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (["a"] * 6, "at least two classes"),
        (["a", None, "b", "b"], "row 1 has no class"),
    ],
)
def test_inputs_the_reference_cannot_run_are_refused(labels: list, message: str) -> None:
    features = unit_rows(np.random.default_rng(0), len(labels), 4)
    with pytest.raises(VlbenchError, match=message):
        fewshot_folds(features, labels, [2], 2)


def test_a_k_that_leaves_no_query_is_not_computable() -> None:
    features = unit_rows(np.random.default_rng(0), 4, 4)
    (result,) = fewshot_folds(features, ["a", "a", "b", "b"], [2], 2)
    assert result.not_computable == "k=2: every class has exactly k images, none is left to query"
