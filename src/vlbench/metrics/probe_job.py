"""The probe jobs: a benchmark's folds file, then per model a classifier's metric rows.

`write_probe_folds` draws every fold of a classifier (`vlbench.metrics.probe_folds`) from the
prepared images' classes, once per benchmark, so that every model trains on the same images
and anyone can rerun a fold. `write_probe` trains and scores the classifier on a model's cached
image embeddings over those folds; each fold tests on every image outside its support and its
validation part. Rows (`vlbench.metrics.fold_rows`), per k:

- `linear` (clip_benchmark's linear probe; fold n trains with seed n): `lp_acc1`, `lp_acc5`,
  `lp_mean_per_class_recall`, and `fold_weight_decays` (each fold's chosen weight decay);
- `logistic` (mteb's k-shot logistic regression): `logreg_accuracy`, `logreg_f1` (macro F1),
  and `n_unconverged_folds` (fits that stopped at `max_iter`, as scikit-learn warns in mteb).

`chance`: 100 / classes for accuracies and mean per-class recall, min(500 / classes, 100) for
top-5, and for macro F1 the F1 of a uniform random guess on the benchmark's class shares (the
mean over classes of 2 p (1 / C) / (p + 1 / C)). `n_short_classes`: classes with k images or
fewer, which leave none to test.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from vlbench.errors import VlbenchError
from vlbench.metrics.fewshot_job import classes_in_file_order, read_folds
from vlbench.metrics.fold_rows import (
    FOLD_COLUMNS,
    LINEAR_METRICS,
    LOGISTIC_METRICS,
    fold_frame,
    fold_row,
)
from vlbench.metrics.job import write_csv
from vlbench.metrics.linear_probe import LinearSettings, linear_probe
from vlbench.metrics.logistic_probe import logistic_probe
from vlbench.metrics.probe_folds import (
    ProbeFold,
    class_indices,
)
from vlbench.rank.protocol_ranks import normalise_rows

_EXTRA = {
    "linear": {"fold_weight_decays": pl.String},
    "logistic": {"n_unconverged_folds": pl.Int64},
}


def _uniform_guess_f1(targets: np.ndarray) -> float:
    """Macro F1 (percent) of guessing every class with probability 1 / C on these shares."""
    shares = np.bincount(targets) / len(targets)
    guess = 1.0 / len(shares)
    return float(np.mean(2 * shares * guess / (shares + guess))) * 100


def _chance(metric: str, targets: np.ndarray) -> float:
    classes = int(targets.max()) + 1
    if metric == "lp_acc5":
        return min(500.0 / classes, 100.0)
    if metric == "logreg_f1":
        return _uniform_guess_f1(targets)
    return 100.0 / classes


def _split(item: ProbeFold, n_images: int) -> tuple[np.ndarray, np.ndarray]:
    """The fold's training part (every image outside its validation part) and its test images."""
    training = np.ones(n_images, dtype=bool)
    training[item.validation] = False
    test = training.copy()
    test[item.support] = False
    return np.flatnonzero(training), np.flatnonzero(test)


def _fold_scores(
    classifier: str,
    item: ProbeFold,
    features: np.ndarray,
    targets: np.ndarray,
    settings: Mapping[str, Any],
) -> tuple[dict[str, float | None], int, Any]:
    """One fold: each metric's fraction, the test size and the fold's detail (the chosen
    weight decay, or whether the fit converged); nothing is trained for a fold that leaves no
    image to test."""
    training, test = _split(item, len(targets))
    if not len(test):
        return {}, 0, None
    support = (features[item.support], targets[item.support])
    tested = (features[test], targets[test])
    if classifier == "linear":
        validation = (
            (features[item.validation], targets[item.validation]) if len(item.validation) else None
        )
        result = linear_probe(
            *support,
            *tested,
            classes=int(targets[training].max()) + 1,
            seed=item.fold,
            settings=LinearSettings(
                float(settings["lr"]), int(settings["epochs"]), int(settings["batch_size"])
            ),
            validation=validation,
        )
        scores = dict(
            zip(
                LINEAR_METRICS,
                (result.top1, result.top5, result.mean_per_class_recall),
                strict=True,
            )
        )
        return scores, len(test), result.weight_decay
    result = logistic_probe(*support, *tested, int(settings["seed"]), int(settings["max_iter"]))
    return (
        dict(zip(LOGISTIC_METRICS, (result.accuracy, result.f1), strict=True)),
        len(test),
        result.converged,
    )


def _reason(
    metric: str, folds: Sequence[ProbeFold], values: Sequence[float | None], tested: int
) -> str:
    """Why a (metric, k) row has no value: a fold the reference cannot run (the row needs all
    of them), a fold with no image to test, or clip_benchmark's missing top-5."""
    stopped = [item.not_computable for item in folds if item.not_computable]
    if stopped:
        return stopped[0]
    if tested < len(folds):
        return f"k={folds[0].shots}: a fold leaves no image to test outside its support"
    if any(value is None for value in values):
        return (
            f"k={folds[0].shots}: clip_benchmark reports no {metric} when the test's largest "
            "class index is below 5"
        )
    return ""


def score_probe(
    classifier: str,
    features: np.ndarray,
    groups: Sequence[str],
    folds: Sequence[ProbeFold],
    settings: Mapping[str, Any],
    labels: Mapping[str, str],
    confidence: float,
    log: logging.Logger | None = None,
) -> pl.DataFrame:
    """The classifier's rows over its folds; `features` and `groups` in sample order."""
    _, targets = class_indices(groups)
    features = normalise_rows(features)
    metrics = LINEAR_METRICS if classifier == "linear" else LOGISTIC_METRICS
    counts = np.bincount(targets)
    rows = []
    for k in dict.fromkeys(item.shots for item in folds):
        of_k = [item for item in folds if item.shots == k]
        values: dict[str, list[float | None]] = {metric: [] for metric in metrics}
        details, n_test, tested = [], 0, 0
        for item in of_k:
            if item.not_computable:
                continue
            scores, size, detail = _fold_scores(classifier, item, features, targets, settings)
            if size == 0:
                continue
            n_test, tested = max(n_test, size), tested + 1
            details.append(detail)
            for metric in metrics:
                values[metric].append(scores[metric])
            if log is not None:
                log.info("%s k=%d fold %d: %s (%s)", classifier, k, item.fold, scores, detail)
        for metric in metrics:
            reason = _reason(metric, of_k, values[metric], tested)
            row = fold_row(
                labels,
                metric,
                k,
                [] if reason else values[metric],
                confidence,
                n_queries=n_test,
                chance=_chance(metric, targets),
                n_classes=len(counts),
                n_short_classes=int(np.sum(counts <= k)),
                not_computable=reason,
            )
            if classifier == "linear":
                row["fold_weight_decays"] = ";".join(f"{value:.6g}" for value in details)
            else:
                row["n_unconverged_folds"] = sum(not converged for converged in details)
            rows.append(row)
    extra = _EXTRA[classifier]
    return fold_frame(rows, [*FOLD_COLUMNS, *extra], extra)


def write_probe(
    classifier: str,
    embeddings: tuple[np.ndarray, np.ndarray],
    images_path: str | Path,
    folds_path: str | Path,
    settings: Mapping[str, Any],
    labels: Mapping[str, str],
    confidence: float,
    out_path: str | Path,
    log: logging.Logger | None = None,
) -> int:
    """Write a classifier's metric CSV for one model and benchmark; return the row count."""
    features, groups, ids = classes_in_file_order(images_path, *embeddings)
    folds = read_folds(folds_path, ids)
    if not folds:
        raise VlbenchError(f"{folds_path}: no fold (the {classifier} probe's shots list is empty)")
    rows = score_probe(classifier, features, groups, folds, settings, labels, confidence, log)
    write_csv(rows, out_path)
    return rows.height
