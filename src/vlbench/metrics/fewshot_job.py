"""One few-shot metrics job: a benchmark's cached image embeddings and classes -> metric rows.

The rows have the metric files' long format (`vlbench.metrics.rows.METRIC_COLUMNS`) so that the
tables job reads them with every other metric file: metric `fewshot_accuracy`, `k` = shots per
class, direction `image_to_image` (image queries against centroids of support images), `value`
the mean accuracy over the folds (percent), `ci_low`/`ci_high` the Student t-interval over the
fold accuracies, `n_queries` the queries of one fold. Extra columns: `fold_std` (standard
deviation over folds, ddof = 0, as BioCLIP logs it), `n_folds`, `fold_values` (each fold's
accuracy), `n_classes`, `n_short_classes` (classes with fewer than k + 5 images, which BioCLIP
logs as "not enough for evaluation" and keeps), `chance` (100 / classes), `n_tied_queries`
(queries decided by an exact distance tie, summed over folds), `tie_policy` and
`not_computable`: empty, or why the reference cannot run this k (the classes with fewer than k
images and their counts); such a row has no value, interval or folds, and every other k of the
benchmark is still computed and written.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from vlbench.data.canonical import read_parquet
from vlbench.errors import VlbenchError
from vlbench.metrics.fewshot import (
    SHORT_MARGIN,
    FewShotResult,
    FewShotSplit,
    fewshot_folds,
    score_splits,
)
from vlbench.metrics.fold_rows import FOLD_COLUMNS, fold_frame, fold_row
from vlbench.metrics.job import write_csv
from vlbench.metrics.probe_folds import ProbeFold, folds_from_table
from vlbench.rank.protocol_ranks import normalise_rows

FEWSHOT_METRIC = "fewshot_accuracy"
FEWSHOT_TIE_POLICY = "first_class"
_TIE_COLUMNS = ["n_tied_queries", "tie_policy"]
# The fold columns with the tie columns after `chance_flag`.
FEWSHOT_COLUMNS = [
    *FOLD_COLUMNS[: FOLD_COLUMNS.index("chance_flag") + 1],
    *_TIE_COLUMNS,
    *FOLD_COLUMNS[FOLD_COLUMNS.index("chance_flag") + 1 :],
]


def fewshot_rows(
    results: Sequence[FewShotResult], labels: Mapping[str, str], confidence: float
) -> pl.DataFrame:
    """One metric row per k; `labels` holds benchmark, subset and model."""
    rows = []
    for result in results:
        row = fold_row(
            labels,
            FEWSHOT_METRIC,
            result.shots,
            result.fold_accuracies,
            confidence,
            n_queries=result.n_queries,
            chance=100.0 / result.n_classes,
            n_classes=result.n_classes,
            n_short_classes=len(result.short_classes),
            not_computable=result.not_computable,
        )
        rows.append(
            {**row, "n_tied_queries": result.n_tied_queries, "tie_policy": FEWSHOT_TIE_POLICY}
        )
    return fold_frame(rows, FEWSHOT_COLUMNS, {})


def log_short_classes(results: Sequence[FewShotResult], log: logging.Logger) -> None:
    """Name the classes the reference logs as not enough for evaluation, per k, and every k
    that could not be computed."""
    for result in results:
        if result.not_computable:
            log.warning("not computable: %s", result.not_computable)
        if result.short_classes:
            log.info(
                "k=%d: %d classes with fewer than %d images (kept, as BioCLIP does): %s",
                result.shots,
                len(result.short_classes),
                result.shots + SHORT_MARGIN,
                ", ".join(result.short_classes),
            )


def _require_classes(images_path: str | Path, ids: Sequence[str], groups: Sequence[object]) -> None:
    """Stop naming the first image without a class."""
    for item, group in zip(ids, groups, strict=True):
        if group is None:
            raise VlbenchError(f"{images_path}: image {item!r} has no class (group)")


def labelled_images(images_path: str | Path) -> tuple[list[str], list[str]]:
    """Image ids and classes of a prepared images file, in its (the source's sample) order."""
    table = read_parquet(images_path, columns=["image_id", "group"])
    ids, groups = table.column("image_id").to_pylist(), table.column("group").to_pylist()
    _require_classes(images_path, ids, groups)
    return ids, [str(group) for group in groups]


def classes_in_file_order(
    images_path: str | Path, matrix: np.ndarray, ids: np.ndarray
) -> tuple[np.ndarray, list[str], list[str]]:
    """The embedding rows reordered to the prepared images file's row order (the source's
    sample order), with each image's class and the file's image ids."""
    file_ids, classes = labelled_images(images_path)
    position = {item: row for row, item in enumerate(ids.tolist())}
    in_file = set(file_ids)
    unmatched = [item for item in file_ids if item not in position]
    unmatched += [item for item in ids.tolist() if item not in in_file]
    if unmatched:
        raise VlbenchError(
            f"{images_path}: image {unmatched[0]!r} is in only one of the images file and its "
            "embeddings (rerun the gather job)"
        )
    order = np.fromiter((position[item] for item in file_ids), dtype=np.int64)
    return matrix[order], classes, file_ids


def read_folds(folds_path: str | Path, image_ids: Sequence[str]) -> list[ProbeFold]:
    """The folds of a folds file, as positions in the images file's order."""
    return folds_from_table(pl.read_parquet(folds_path), image_ids, str(folds_path))


def score_fewshot(
    vectors: np.ndarray,
    classes: Sequence[str],
    settings: Mapping[str, Any],
    labels: Mapping[str, str],
    confidence: float,
    log: logging.Logger | None = None,
) -> pl.DataFrame:
    """Few-shot rows of image embeddings in sample order; `settings` is a benchmark's
    `fewshot` config entry (shots, folds, shuffle)."""
    try:
        results = fewshot_folds(
            normalise_rows(vectors),
            classes,
            list(settings["shots"]),
            int(settings["folds"]),
            settings["shuffle"],
        )
    except VlbenchError as error:
        raise VlbenchError(f"{labels['benchmark']}: {error}") from None
    if log is not None:
        log_short_classes(results, log)
    return fewshot_rows(results, labels, confidence)


def splits_of(
    folds: Sequence[ProbeFold], settings: Mapping[str, Any], source: str
) -> tuple[list[FewShotSplit], dict[int, str]]:
    """The few-shot splits of a folds file and the reasons of its not-computable ks, checked to
    be the folds of the benchmark's `fewshot` entry."""
    shots, count = list(settings["shots"]), int(settings["folds"])
    reasons = {item.shots: item.not_computable for item in folds if item.not_computable}
    splits = [
        FewShotSplit(item.shots, item.fold, item.support)
        for item in folds
        if not item.not_computable
    ]
    expected = {(k, fold) for k in shots if k not in reasons for fold in range(count)}
    if {(split.shots, split.fold) for split in splits} != expected or not set(reasons) <= set(
        shots
    ):
        raise VlbenchError(
            f"{source}: its folds are not those of the few-shot entry (shots {shots}, {count} "
            "folds; rerun the folds job)"
        )
    return splits, reasons


def write_fewshot(
    embeddings: tuple[np.ndarray, np.ndarray],
    images_path: str | Path,
    folds_path: str | Path,
    settings: Mapping[str, Any],
    labels: Mapping[str, str],
    confidence: float,
    out_path: str | Path,
    log: logging.Logger | None = None,
) -> int:
    """Write a benchmark's few-shot metric CSV from its (matrix, ids) over the benchmark's
    few-shot folds file; return the row count."""
    vectors, classes, ids = classes_in_file_order(images_path, *embeddings)
    splits, reasons = splits_of(read_folds(folds_path, ids), settings, str(folds_path))
    shots = list(settings["shots"])
    try:
        results = score_splits(normalise_rows(vectors), classes, shots, splits, reasons)
    except VlbenchError as error:
        raise VlbenchError(f"{labels['benchmark']}: {error}") from None
    if log is not None:
        log_short_classes(results, log)
    rows = fewshot_rows(results, labels, confidence)
    write_csv(rows, out_path)
    return rows.height
