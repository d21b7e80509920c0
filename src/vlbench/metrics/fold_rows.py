"""Metric rows of a classifier evaluated over folds (few-shot and probe classifiers).

One row per (metric, k) in the metric files' long format (`vlbench.metrics.rows.METRIC_COLUMNS`),
read by the tables job beside every other metric file: `value` the mean over the folds (percent),
`ci_low`/`ci_high` the Student t-interval over the fold values, `n_queries` the test images of
one fold (the largest where folds differ), and the fold columns: `fold_std` (ddof = 0),
`n_folds`, `fold_values` (each fold's value, `;`-separated), `n_classes`, `n_short_classes`,
`chance`, `chance_flag` and `not_computable` (empty, or why the reference cannot run this k; such
a row has no value, interval or folds).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from vlbench.metrics.rows import METRIC_COLUMNS
from vlbench.metrics.statistics import indistinguishable_from_chance, t_interval

# The metrics of the probe classifiers (vlbench.metrics.probe_job), by classifier.
LINEAR_METRICS = ("lp_acc1", "lp_acc5", "lp_mean_per_class_recall")
LOGISTIC_METRICS = ("logreg_accuracy", "logreg_f1")
PROBE_METRICS = (*LINEAR_METRICS, *LOGISTIC_METRICS)
# The direction of metrics computed from image features and image labels alone.
FOLD_DIRECTION = "image_to_image"
# The column that says why a k could not be computed (read again by the tables).
NOT_COMPUTABLE_COLUMN = "not_computable"
FOLD_COLUMNS = [
    *METRIC_COLUMNS,
    "unit",
    "chance",
    "chance_flag",
    "fold_std",
    "n_folds",
    "fold_values",
    "n_classes",
    "n_short_classes",
    NOT_COMPUTABLE_COLUMN,
]
FOLD_SCHEMA = {
    "k": pl.Int64,
    "value": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "n_queries": pl.Int64,
    "chance": pl.Float64,
    "chance_flag": pl.Boolean,
    "fold_std": pl.Float64,
    "n_folds": pl.Int64,
    "fold_values": pl.String,
    NOT_COMPUTABLE_COLUMN: pl.String,
}


def row_labels(meta_path: str | Path, benchmark: str, model: str) -> dict[str, str]:
    """The benchmark, subset (the prepared benchmark's subset, else its split) and model of a
    job's rows."""
    with open(meta_path, encoding="utf-8") as handle:
        meta = json.load(handle)
    return {"benchmark": benchmark, "subset": meta.get("subset") or meta["split"], "model": model}


def fold_row(
    labels: Mapping[str, str],
    metric: str,
    k: int,
    fractions: Sequence[float],
    confidence: float,
    *,
    n_queries: int,
    chance: float | None,
    n_classes: int,
    n_short_classes: int,
    not_computable: str = "",
) -> dict[str, Any]:
    """One metric row from each fold's value as a fraction (none where not computable)."""
    fractions = np.asarray(fractions, dtype=np.float64)
    folds = 100.0 * fractions
    ci_low, ci_high = t_interval(folds, confidence) if len(folds) else (None, None)
    computed = len(folds) > 0
    return {
        **labels,
        "direction": FOLD_DIRECTION,
        "metric": metric,
        "k": k,
        "value": float(np.mean(fractions)) * 100 if computed else None,
        "ci_low": ci_low,
        "ci_high": ci_high,
        "n_queries": n_queries,
        "unit": "percent",
        "chance": chance,
        "chance_flag": (
            indistinguishable_from_chance(ci_low, ci_high, chance)
            if computed and chance is not None
            else None
        ),
        "fold_std": float(np.std(fractions)) * 100 if computed else None,
        "n_folds": len(folds),
        "fold_values": ";".join(f"{value:.6f}" for value in folds),
        "n_classes": n_classes,
        "n_short_classes": n_short_classes,
        NOT_COMPUTABLE_COLUMN: not_computable or None,
    }


def fold_frame(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], extra: Mapping[str, Any]
) -> pl.DataFrame:
    """The rows as a frame of `columns`, typed by the fold columns' types and `extra`'s."""
    schema = {**FOLD_SCHEMA, **extra}
    return pl.DataFrame(list(rows), schema_overrides=schema).select(list(columns))
