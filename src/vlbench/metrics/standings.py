"""Standings of the models in one table column: rank with an interval, and who is tied with
the best.

A column is one (benchmark, subset, direction, metric, k) of mean-type metrics; every model
is scored on the same queries (the queries all of them have). In it:

- **Rank**: 1 + the number of models with a better value (equal values share a rank). Its
  interval resamples the queries with replacement (the same resamples for every model, seeded
  by `metrics.seed`), ranks the models in each resample and takes the central
  `metrics.confidence` part of each model's ranks (inverted-CDF quantiles: ranks that occurred).
- **Tied with the best**: the best model (highest value; lowest for rank-unit metrics; the
  first in model order among equal values) and every model not significantly worse than it.
  Each other model is tested against the best on the same queries with a one-sided paired
  sign-flip permutation test of the mean difference (the resampling unit is the query; the
  same `metrics.permutation_samples` flips for every model, seeded by `metrics.seed`):
  p = (1 + #{flipped mean difference >= observed}) / (1 + samples). Holm's step-down
  correction across the column's other models controls the family-wise error at
  1 - `metrics.confidence`; a model whose corrected p-value exceeds it is tied with the best.
  This is BioBench's rule (one-sided test against the best, Holm) with a permutation test in
  place of its bootstrap.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from vlbench.metrics.rows import StatsSettings
from vlbench.metrics.statistics import (
    resampled_means,
    resampled_means_of,
    sign_flipped_means,
    sign_flipped_means_of,
)

STANDINGS_COLUMNS = [
    "benchmark",
    "subset",
    "direction",
    "metric",
    "k",
    "model",
    "value",
    "rank",
    "rank_low",
    "rank_high",
    "best_model",
    "p_worse",
    "p_holm",
    "tied_with_best",
    "n_models",
    "n_queries",
]
COLUMN_KEYS = ["benchmark", "subset", "direction", "metric", "k"]


@dataclass(frozen=True)
class Standing:
    """One model's place in a column (p-values are None for the best model itself)."""

    model: str
    value: float
    rank: int
    rank_low: int
    rank_high: int
    p_worse: float | None
    p_holm: float | None
    tied_with_best: bool


def holm_adjusted(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (capped at 1), in the order given."""
    p = np.asarray(p_values, dtype=np.float64)
    adjusted = np.empty(len(p))
    running = 0.0
    for position, index in enumerate(np.argsort(p, kind="stable")):
        running = max(running, min(1.0, (len(p) - position) * p[index]))
        adjusted[index] = running
    return adjusted


def competition_ranks(scores: np.ndarray) -> np.ndarray:
    """1 + the number of rows with a higher score, per column (rows x samples in, ints out)."""
    return 1 + np.stack([(scores > row).sum(axis=0) for row in scores])


def column_standings(
    models: Sequence[str],
    outcomes: np.ndarray,
    higher_is_better: bool,
    confidence: float,
    bootstrap_samples: int,
    permutation_samples: int,
    seed: int,
    draws: tuple[np.ndarray, np.ndarray] | None = None,
) -> list[Standing]:
    """The standings of `models` from their per-query outcomes (models x the same queries).

    `draws`: the outcomes' `resampled_means` and `sign_flipped_means` for these settings, when
    computed already (`standings_table` draws them once for every column of a query count).
    """
    values = np.asarray(outcomes, dtype=np.float64)
    if draws is None:
        draws = (
            resampled_means(values, bootstrap_samples, seed),
            sign_flipped_means(values, permutation_samples, seed + 1),
        )
    resampled_values, flipped = draws
    sign = 1.0 if higher_is_better else -1.0
    means = values.mean(axis=1)
    ranks = competition_ranks((sign * means)[:, None])[:, 0]
    best = int(np.argmax(sign * means))
    alpha = 1.0 - confidence
    if values.shape[1] >= 2 and bootstrap_samples >= 1:
        resampled = competition_ranks(sign * resampled_values)
        bounds = np.quantile(resampled, [alpha / 2, 1 - alpha / 2], axis=1, method="inverted_cdf")
    else:
        bounds = np.vstack([ranks, ranks])
    others = [index for index in range(len(models)) if index != best]
    p_worse = np.ones(len(models))
    for index in others:
        difference = sign * (values[best] - values[index])
        if not np.any(difference):
            continue
        observed = float(difference.mean())
        null = sign * (flipped[best] - flipped[index])
        extreme = int(np.count_nonzero(null >= observed - 1e-12 * max(1.0, abs(observed))))
        p_worse[index] = (1 + extreme) / (1 + permutation_samples)
    adjusted = np.ones(len(models))
    adjusted[others] = holm_adjusted(p_worse[others])
    return [
        Standing(
            model=model,
            value=float(means[index]),
            rank=int(ranks[index]),
            rank_low=int(bounds[0][index]),
            rank_high=int(bounds[1][index]),
            p_worse=None if index == best else float(p_worse[index]),
            p_holm=None if index == best else float(adjusted[index]),
            tied_with_best=index == best or bool(adjusted[index] > alpha),
        )
        for index, model in enumerate(models)
    ]


def marked_best(row: Mapping[str, Any]) -> bool:
    """Whether a metric row (of metrics_full.csv) is the best of two or more models in its
    column or tied with it: what the tables mark."""
    return bool(row.get("tied_with_best")) and (row.get("n_models") or 0) >= 2


def _shared_queries(frame: pl.DataFrame, models: list[str]) -> np.ndarray | None:
    """Models x queries outcomes on the queries every model has (each once), in the first
    model's order; None when a model has a query twice or no query is shared."""
    by_model = [frame.filter(pl.col("model") == model) for model in models]
    if any(part["query_id"].n_unique() != part.height for part in by_model):
        return None
    shared = set(by_model[0]["query_id"].to_list())
    for part in by_model[1:]:
        shared &= set(part["query_id"].to_list())
    order = [query for query in by_model[0]["query_id"].to_list() if query in shared]
    if not order:
        return None
    index = pl.DataFrame({"query_id": order})
    rows = [
        index.join(part, on="query_id", how="left", maintain_order="left")["outcome"].to_numpy()
        for part in by_model
    ]
    return np.vstack(rows).astype(np.float64)


def _with_group_subsets(table: pl.DataFrame, subsets: Collection[tuple[str, str]]) -> pl.DataFrame:
    """The outcomes, plus each query group's outcomes again under the group's name as subset
    where the metric tables have that (benchmark, subset): grouped protocols report each group
    as a subset of its own (vlbench.metrics.rows.metric_rows)."""
    groups = table.filter(
        pl.col("query_group").is_not_null() & (pl.col("query_group") != pl.col("subset"))
    ).with_columns(pl.col("query_group").alias("subset"))
    wanted = [
        (benchmark, subset) in subsets
        for benchmark, subset in groups.select("benchmark", "subset").iter_rows()
    ]
    return pl.concat([table, groups.filter(pl.Series(wanted, dtype=pl.Boolean))])


def _shared_draws(
    matrices: list[np.ndarray], settings: StatsSettings
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each matrix's resample and sign-flip means, drawn once for all matrices of one query
    count: the draws depend on the count and the seed only, so every column of a benchmark
    shares them (what `column_standings` would draw for each, in one pass)."""
    by_count: dict[int, list[int]] = {}
    for index, matrix in enumerate(matrices):
        by_count.setdefault(matrix.shape[1], []).append(index)
    draws: list[tuple[np.ndarray, np.ndarray]] = [None] * len(matrices)  # type: ignore[list-item]
    for indices in by_count.values():
        group = [matrices[index] for index in indices]
        resampled = resampled_means_of(group, settings.bootstrap_samples, settings.seed)
        flipped = sign_flipped_means_of(group, settings.permutation_samples, settings.seed + 1)
        for index, pair in zip(indices, zip(resampled, flipped, strict=True), strict=True):
            draws[index] = pair
    return draws


def standings_table(
    outcome_files: Iterable[str | Path],
    settings: StatsSettings,
    subsets: Collection[tuple[str, str]] = (),
) -> pl.DataFrame:
    """STANDINGS_COLUMNS for every column of mean-type metrics in the outcome files.

    `subsets`: the (benchmark, subset) pairs of the metric tables; a query group named there
    gets columns of its own.
    """
    frames = [pl.read_parquet(path) for path in outcome_files]
    frames = [frame for frame in frames if frame.height]
    columns = []  # (labels, models, outcomes, higher is better) of each column
    if frames:
        table = pl.concat(frames, how="vertical_relaxed").filter(pl.col("statistic") == "mean")
        table = _with_group_subsets(table, set(subsets))
        for key, frame in table.group_by(COLUMN_KEYS, maintain_order=True):
            models = sorted(frame["model"].unique().to_list())
            matrix = _shared_queries(frame, models)
            if matrix is not None:
                labels = dict(zip(COLUMN_KEYS, key, strict=True))
                columns.append((labels, models, matrix, frame["unit"][0] != "rank"))
    draws = _shared_draws([matrix for _, _, matrix, _ in columns], settings)
    rows = []
    for (labels, models, matrix, higher), column_draws in zip(columns, draws, strict=True):
        standings = column_standings(
            models,
            matrix,
            higher_is_better=higher,
            confidence=settings.confidence,
            bootstrap_samples=settings.bootstrap_samples,
            permutation_samples=settings.permutation_samples,
            seed=settings.seed,
            draws=column_draws,
        )
        best = next(s.model for s in standings if s.p_worse is None)
        for standing in standings:
            rows.append(
                {
                    **labels,
                    **standing.__dict__,
                    "best_model": best,
                    "n_models": len(models),
                    "n_queries": matrix.shape[1],
                }
            )
    schema = {
        **dict.fromkeys(STANDINGS_COLUMNS, pl.String),
        "k": pl.Int64,
        "value": pl.Float64,
        **dict.fromkeys(["rank", "rank_low", "rank_high", "n_models", "n_queries"], pl.Int64),
        "p_worse": pl.Float64,
        "p_holm": pl.Float64,
        "tied_with_best": pl.Boolean,
    }
    return pl.DataFrame(rows, schema=schema).select(STANDINGS_COLUMNS)
