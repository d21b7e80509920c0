"""Scoring one direction: its ranks -> metric rows, per-query outcomes, zero-shot per-class."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from vlbench.atomic import atomic_path
from vlbench.metrics.rows import (
    StatsSettings,
    metric_rows,
    notebook_columns,
    outcomes_table,
    per_class_table,
)
from vlbench.protocols import Protocol


def write_csv(table: pl.DataFrame, path: str | Path) -> None:
    """Atomically write a CSV."""
    with atomic_path(path) as tmp:
        table.write_csv(tmp)


def score_ranks(
    ranks: pl.DataFrame,
    protocol: Protocol,
    ks: list[int],
    labels: dict[str, str],
    tie_policy: str,
    settings: StatsSettings,
    notebook_names: bool = False,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Metric rows and the labelled per-query outcomes of one direction's ranks.

    `labels` holds benchmark, subset, model and direction.
    """
    outcomes = outcomes_table(ranks, protocol, ks)
    rows = metric_rows(outcomes, protocol, **labels, tie_policy=tie_policy, settings=settings)
    if notebook_names:
        rows = notebook_columns(rows)
    labelled = outcomes.select(
        *[pl.lit(value).alias(key) for key, value in labels.items()], pl.all()
    )
    return rows, labelled


def write_metrics(
    ranks_path: str | Path,
    protocol: Protocol,
    ks: list[int],
    labels: dict[str, str],
    tie_policy: str,
    stats: dict[str, Any] | None,
    metrics_path: str | Path,
    outcomes_path: str | Path,
    notebook_names: bool = False,
) -> int:
    """Write the metric CSV and the per-query outcomes parquet; return the number of rows."""
    ranks = pl.read_parquet(ranks_path)
    rows, outcomes = score_ranks(
        ranks, protocol, ks, labels, tie_policy, StatsSettings.from_config(stats), notebook_names
    )
    write_csv(rows, metrics_path)
    with atomic_path(outcomes_path) as tmp:
        outcomes.write_parquet(tmp)
    return rows.height


def write_per_class(ranks_path: str | Path, labels: dict[str, str], out_path: str | Path) -> int:
    """Write the zero-shot per-class accuracy table; return the number of classes."""
    table = per_class_table(pl.read_parquet(ranks_path), **labels)
    write_csv(table, out_path)
    return table.height
