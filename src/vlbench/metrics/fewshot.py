"""Few-shot classification from image embeddings, computed as BioCLIP's evaluation does.

BioCLIP's `src/evaluation/few_shot.py` (repository Imageomics/bioclip; BioCLIP 2 ships the same
file) evaluates a nearest-centroid classifier on a labelled image set:

- Classes are taken in order of their first image in the dataset's sample order, each with its
  images in sample order.
- For each k of the k list, in list order, and each fold n = 0 .. folds - 1: Python's `random` is
  seeded with n, and every class's image list is shuffled with `random.shuffle`, class after
  class. The shuffles are in place, so fold n starts from the order fold n - 1 left, and the first
  fold of a k from the order the previous k left (`shuffle="in_place"`). BioCLIP 2's
  `src/evaluation/classification.py` shuffles a fresh copy of the sample order in every fold
  instead (`shuffle="fresh"`), so a fold depends only on its number.
- The first k images of a class are its support set, the rest are queried.
- CL2N: support and query features are centred on the mean of all support features and
  L2-normalised; a class's centroid is the mean of its k normalised support features.
- A query takes the class of the nearest centroid (Euclidean distance); the fold's accuracy is the
  share of queries classified correctly. The reference then logs the mean over folds and their
  standard deviation (numpy's default, ddof = 0).

The reference picks the nearest centroid with `np.argpartition(distance, 1, axis=0)[:1]` and a
`scipy.stats.mode` over that one neighbour (the mode of one value is that value). On distances
that are exactly equal, argpartition's choice is unspecified by numpy: its scalar introselect
keeps the first class in class order (a selection scan with a strict `<`), its x86-simd-sort
paths may pick another (numpy 2.4 on an AVX2 machine does, from five classes on). We take the
first class in class order and count such queries (`n_tied_queries`).

Arithmetic: support mean, CL2N and centroids are computed with the reference's own numpy
operations on float32 rows laid out as the reference stacks them, so they are bitwise the
reference's (on the same numpy). Distances are screened through a float32 matrix product
(fast); a query with a second centroid within the product's rounding bound of the nearest one
(`_screen_margin`) has those distances recomputed exactly as the reference computes them
(float32 `LA.norm` of the difference), so the decision is the reference's.

Classes with fewer than k images make the reference stop (its support set assert fails), and so
does a k that leaves no image to query. Such a k is not computable: `fewshot_folds` skips it as
if it were not listed (no shuffles are drawn for it, so the other ks' folds are the ones the
reference computes on the k list without it) and its result names the classes and their counts
(`not_computable`); every other k is computed. Classes with at least k but fewer than k + 5
images are logged by the reference ("not enough for evaluation") and kept; they are reported
here (`short_classes`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from vlbench.errors import VlbenchError

# BioCLIP logs a class with fewer than k + SHORT_MARGIN images as "not enough for evaluation".
SHORT_MARGIN = 5
SHUFFLES = ("in_place", "fresh")
# Queries per block of the distance matrix (block x classes float64 values).
_BLOCK = 4096


@dataclass(frozen=True)
class FewShotResult:
    """One k: the accuracy of every fold and what qualifies it."""

    shots: int
    fold_accuracies: tuple[float, ...]
    n_queries: int
    n_classes: int
    n_tied_queries: int
    short_classes: tuple[str, ...]
    # Why this k cannot be computed (empty: it was): the classes short of k, with their counts.
    not_computable: str = ""

    @property
    def mean(self) -> float | None:
        """Mean accuracy over the folds (a fraction), as the reference computes it."""
        return float(np.mean(self.fold_accuracies)) if self.fold_accuracies else None

    @property
    def std(self) -> float | None:
        """Standard deviation over the folds, numpy's default ddof = 0 (the reference's)."""
        return float(np.std(self.fold_accuracies)) if self.fold_accuracies else None


def class_members(labels: Sequence[object]) -> tuple[list[str], list[list[int]]]:
    """Classes in order of first appearance, each with its row positions in row order."""
    members: dict[str, list[int]] = {}
    for position, label in enumerate(labels):
        if label is None:
            raise VlbenchError(f"few-shot: image row {position} has no class")
        members.setdefault(str(label), []).append(position)
    return list(members), list(members.values())


def check_classes(classes: Sequence[str], members: Sequence[Sequence[int]]) -> None:
    """Fail where the reference cannot run any k: fewer than two classes."""
    if len(classes) < 2:
        raise VlbenchError(
            f"few-shot needs at least two classes, found {len(classes)} (the reference's "
            "argpartition over the class axis fails on one)"
        )


# Classes named in a not-computable reason; the rest are counted.
_NAMED_CLASSES = 5


def not_computable_reason(
    classes: Sequence[str], members: Sequence[Sequence[int]], shots: int
) -> str:
    """Why the reference cannot run this k (empty when it can): every class short of k images,
    smallest first, with its count, or no image left to query."""
    short = sorted(
        (
            (len(rows), name)
            for name, rows in zip(classes, members, strict=True)
            if len(rows) < shots
        )
    )
    if short:
        named = ", ".join(f"{name!r} ({count})" for count, name in short[:_NAMED_CLASSES])
        more = f" and {len(short) - _NAMED_CLASSES} more" if len(short) > _NAMED_CLASSES else ""
        return (
            f"k={shots}: {len(short)} class(es) with fewer than {shots} images: {named}{more} "
            "(BioCLIP's few_shot.py stops there: its support set needs k images of every class)"
        )
    if all(len(rows) == shots for rows in members):
        return f"k={shots}: every class has exactly k images, none is left to query"
    return ""


def fold_splits(
    members: Sequence[Sequence[int]], shots: Sequence[int], folds: int, shuffle: str = "in_place"
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    """(k, fold, support rows, query rows, query class) in the reference's order.

    Support rows are class-major (k per class, in class order), as the reference stacks them.
    """
    if shuffle not in SHUFFLES:
        raise VlbenchError(f"few-shot shuffle must be one of {', '.join(SHUFFLES)}: {shuffle!r}")
    orders = [list(rows) for rows in members]
    for k in shots:
        for fold in range(folds):
            generator = random.Random(fold)
            if shuffle == "fresh":
                orders = [list(rows) for rows in members]
            for order in orders:
                generator.shuffle(order)
            support = np.fromiter((row for order in orders for row in order[:k]), dtype=np.int64)
            queries = np.fromiter((row for order in orders for row in order[k:]), dtype=np.int64)
            truth = np.repeat(np.arange(len(orders)), [max(len(order) - k, 0) for order in orders])
            yield k, fold, support, queries, truth


def cl2n(rows: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Centre on `mean`, then scale every row to unit L2 norm (the reference's CL2N)."""
    centred = rows - mean
    return centred / np.linalg.norm(centred, 2, 1)[:, None]


def _reference_distance(centroids: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Row-wise distance of paired centroid and query rows, in the reference's arithmetic."""
    return np.linalg.norm(centroids - queries, 2, axis=-1)


def _decide(
    centroids: np.ndarray, queries: np.ndarray, candidates: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Nearest class among each query's candidates (a boolean mask), exactly as the reference
    measures it; ties go to the first class. Returns (class, tied) per query."""
    rows, cols = np.nonzero(candidates)  # row-major: each row's classes in class order
    distance = _reference_distance(centroids[cols], queries[rows])
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    lowest = np.minimum.reduceat(distance, starts)
    counts = np.diff(np.r_[starts, len(rows)])
    at_lowest = distance == np.repeat(lowest, counts)
    _, first = np.unique(rows[at_lowest], return_index=True)
    picked = cols[at_lowest][first]
    tied = np.add.reduceat(at_lowest.astype(np.int64), starts) > 1
    return picked, tied


def _screen_margin(dimension: int) -> float:
    """How far (squared distance) a centroid may lie from the screened nearest one and still be
    the reference's choice: twice the float32 matrix product's error bound (|q| = 1, |c| <= 1,
    so at most dimension x 2**-24 per dot product, doubled in 2 q.c), for both centroids, plus
    the float32 rounding of the reference's own distances (below 2**-16 for squared distances
    up to 4), with room to spare."""
    return (4.0 * dimension + 256.0) * 2.0**-24


def nearest_centroid(
    features: np.ndarray, support: np.ndarray, n_classes: int, shots: int, queries: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Predicted class of every query row and whether an exact distance tie decided it.

    A float32 matrix product screens the classes; queries with a second centroid within the
    screening margin are decided by the reference's own distances (`_decide`).
    """
    support_rows = features[support]
    mean = support_rows.mean(axis=0)
    support_rows = cl2n(support_rows, mean)
    centroids = support_rows.reshape(n_classes, shots, support_rows.shape[-1]).mean(1)
    centroid_sq = np.einsum("ij,ij->i", centroids, centroids, dtype=np.float64)
    margin = _screen_margin(centroids.shape[1])
    predicted = np.empty(len(queries), dtype=np.int64)
    tied = np.zeros(len(queries), dtype=bool)
    for start in range(0, len(queries), _BLOCK):
        block = cl2n(features[queries[start : start + _BLOCK]], mean)
        # Squared distance less the query's own squared norm (the same for every class).
        squared = centroid_sq[None, :] - 2.0 * (block @ centroids.T)
        best = squared.min(axis=1)
        near = squared <= (best + margin)[:, None]
        several = near.sum(axis=1) > 1
        chosen = np.argmin(squared, axis=1)
        if several.any():
            chosen[several], tied_block = _decide(centroids, block[several], near[several])
            tied[start : start + len(block)][several] = tied_block
        predicted[start : start + len(block)] = chosen
    return predicted, tied


@dataclass(frozen=True)
class FewShotSplit:
    """One fold of one k: its support rows, class-major (k per class, in class order, as the
    reference stacks them); every other row is queried."""

    shots: int
    fold: int
    support: np.ndarray


def _check_request(shots: Sequence[int], folds: int) -> None:
    if folds < 1:
        raise VlbenchError(f"few-shot needs at least one fold, got {folds}")
    if len(set(shots)) != len(shots):
        raise VlbenchError(f"few-shot: k listed twice in {list(shots)}")


def draw_splits(
    labels: Sequence[object], shots: Sequence[int], folds: int, shuffle: str = "in_place"
) -> tuple[list[FewShotSplit], dict[int, str]]:
    """Every fold of every computable k, in the reference's order, and why each other k cannot
    be computed (k -> reason; no shuffles are drawn for it)."""
    _check_request(shots, folds)
    classes, members = class_members(labels)
    check_classes(classes, members)
    reasons = {k: not_computable_reason(classes, members, k) for k in shots}
    computable = [k for k in shots if not reasons[k]]
    splits = [
        FewShotSplit(k, fold, support)
        for k, fold, support, _, _ in fold_splits(members, computable, folds, shuffle)
    ]
    return splits, {k: reason for k, reason in reasons.items() if reason}


def score_splits(
    features: np.ndarray,
    labels: Sequence[object],
    shots: Sequence[int],
    splits: Sequence[FewShotSplit],
    reasons: dict[int, str],
) -> list[FewShotResult]:
    """The accuracy of every fold of every k, in the k list's order; a k in `reasons` has no
    folds and says why (`not_computable`).

    `features`: float32 rows in the dataset's sample order (L2-normalised, as the reference's
    features are); `labels`: the class of every row.
    """
    if features.ndim != 2 or len(features) != len(labels):
        raise VlbenchError(
            f"few-shot: {features.shape} feature matrix for {len(labels)} labelled images"
        )
    classes, members = class_members(labels)
    check_classes(classes, members)
    truth_of = np.empty(len(labels), dtype=np.int64)
    for number, rows in enumerate(members):
        truth_of[rows] = number
    features = np.ascontiguousarray(features, dtype=np.float32)
    accuracies: dict[int, list[float]] = {k: [] for k in shots}
    ties = dict.fromkeys(shots, 0)
    n_queries = dict.fromkeys(shots, 0)
    for split in splits:
        queried = np.ones(len(labels), dtype=bool)
        queried[split.support] = False
        queries = np.flatnonzero(queried)
        predicted, tied = nearest_centroid(
            features, split.support, len(classes), split.shots, queries
        )
        accuracies[split.shots].append(float(np.mean(predicted == truth_of[queries])))
        ties[split.shots] += int(tied.sum())
        n_queries[split.shots] = len(queries)
    return [
        FewShotResult(
            shots=k,
            fold_accuracies=tuple(accuracies[k]),
            n_queries=n_queries[k],
            n_classes=len(classes),
            n_tied_queries=ties[k],
            short_classes=tuple(
                name
                for name, rows in zip(classes, members, strict=True)
                if k <= len(rows) < k + SHORT_MARGIN
            ),
            not_computable=reasons.get(k, ""),
        )
        for k in shots
    ]


def fewshot_folds(
    features: np.ndarray,
    labels: Sequence[object],
    shots: Sequence[int],
    folds: int,
    shuffle: str = "in_place",
) -> list[FewShotResult]:
    """Accuracy of every fold of every k, in the k list's order; a k the reference cannot run
    has no folds and says why (`not_computable`): `draw_splits`, then `score_splits`."""
    if features.ndim != 2 or len(features) != len(labels):
        raise VlbenchError(
            f"few-shot: {features.shape} feature matrix for {len(labels)} labelled images"
        )
    splits, reasons = draw_splits(labels, shots, folds, shuffle)
    return score_splits(features, labels, shots, splits, reasons)
