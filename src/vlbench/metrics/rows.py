"""Per-query outcomes -> metric rows with t and bootstrap intervals, chance level and flags;
the zero-shot per-class table; paired tests between models."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from vlbench.config import schema_defaults
from vlbench.metrics.outcomes import QueryRanks
from vlbench.metrics.specs import protocol_metrics
from vlbench.metrics.statistics import (
    PairedTest,
    all_paired_tests,
    bootstrap_interval,
    indistinguishable_from_chance,
    paired_test,
    t_interval,
)
from vlbench.protocols import Protocol

METRIC_COLUMNS = [
    "benchmark",
    "subset",
    "model",
    "direction",
    "metric",
    "k",
    "value",
    "ci_low",
    "ci_high",
    "n_queries",
]
EXTRA_COLUMNS = [
    "unit",
    "chance",
    "chance_flag",
    "boot_low",
    "boot_high",
    "n_tied_queries",
    "tie_policy",
]
PAIRED_COLUMNS = [
    "benchmark",
    "subset",
    "direction",
    "metric",
    "k",
    "model_a",
    "model_b",
    "value_a",
    "value_b",
    "difference",
    "diff_low",
    "diff_high",
    "p_value",
    "n_queries",
]


@dataclass(frozen=True)
class StatsSettings:
    """How intervals and tests are computed (config section `metrics`).

    The defaults live in the config schema only; build settings with `from_config`.
    """

    confidence: float
    bootstrap_samples: int
    permutation_samples: int
    seed: int

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None = None) -> StatsSettings:
        """Settings from a `metrics` config section (missing keys: the schema's defaults)."""
        merged = {**schema_defaults("metrics"), **(section or {})}
        return cls(**{key: merged[key] for key in cls.__dataclass_fields__})


def outcomes_table(ranks: pl.DataFrame, protocol: Protocol, ks: Sequence[int]) -> pl.DataFrame:
    """Long per-query outcomes of every metric of `protocol`, in the metric's unit (percent
    metrics x 100), with each query's chance level and whether a tie decided it."""
    q = QueryRanks.from_table(ranks)
    frames = []
    for spec in protocol_metrics(protocol, ks):
        values, chance = spec.outcome(q)
        scale = 100.0 if spec.unit == "percent" else 1.0
        tied = q.tied_at_best() if spec.decisive == "best" else q.tied_anywhere()
        frames.append(
            pl.DataFrame(
                {
                    "metric": spec.name,
                    "k": pl.Series([spec.k] * q.n_queries, dtype=pl.Int64),
                    "unit": spec.unit,
                    "statistic": spec.statistic,
                    "query_id": q.query_ids.tolist(),
                    "query_group": pl.Series(q.query_groups.tolist(), dtype=pl.String),
                    "outcome": values * scale,
                    "chance": chance * scale,
                    "tied": tied,
                }
            )
        )
    return pl.concat(frames)


def _summary(frame: pl.DataFrame, settings: StatsSettings) -> dict:
    values = frame["outcome"].to_numpy()
    statistic = frame["statistic"][0]
    boot_low, boot_high = bootstrap_interval(
        values, settings.bootstrap_samples, settings.seed, settings.confidence, statistic
    )
    if statistic == "median":
        value, (ci_low, ci_high) = float(np.median(values)), (boot_low, boot_high)
        chance = None
    else:
        value = float(values.mean())
        ci_low, ci_high = t_interval(values, settings.confidence)
        chance = float(frame["chance"].mean())
    higher_is_better = frame["unit"][0] != "rank"
    return {
        "value": value,
        "ci_low": ci_low,
        "ci_high": ci_high,
        "n_queries": len(values),
        "unit": frame["unit"][0],
        "chance": chance,
        "chance_flag": indistinguishable_from_chance(ci_low, ci_high, chance, higher_is_better),
        "boot_low": boot_low,
        "boot_high": boot_high,
        "n_tied_queries": int(frame["tied"].sum()),
    }


def metric_rows(
    outcomes: pl.DataFrame,
    protocol: Protocol,
    *,
    benchmark: str,
    subset: str,
    model: str,
    direction: str,
    tie_policy: str,
    settings: StatsSettings | None = None,
) -> pl.DataFrame:
    """One row per metric and cut-off; grouped protocols add one row set per query group,
    with the group name in `subset`."""
    settings = settings or StatsSettings.from_config()
    parts = [(subset, outcomes)]
    if protocol.grouped:
        groups = outcomes["query_group"].drop_nulls().unique().sort().to_list()
        parts += [(group, outcomes.filter(pl.col("query_group") == group)) for group in groups]
    rows = []
    for part_subset, frame in parts:
        for (metric, k), metric_frame in frame.group_by(["metric", "k"], maintain_order=True):
            rows.append(
                {
                    "benchmark": benchmark,
                    "subset": part_subset,
                    "model": model,
                    "direction": direction,
                    "metric": metric,
                    "k": k,
                    **_summary(metric_frame, settings),
                    "tie_policy": tie_policy,
                }
            )
    schema = {"k": pl.Int64, "chance": pl.Float64, "chance_flag": pl.Boolean}
    return pl.DataFrame(rows, schema_overrides=schema).select(METRIC_COLUMNS + EXTRA_COLUMNS)


def per_class_table(
    ranks: pl.DataFrame, class_names: Sequence[str] | None = None, **labels: str
) -> pl.DataFrame:
    """Zero-shot accuracy per true class (percent), in class order when `class_names` is given."""
    table = (
        ranks.group_by("query_group", maintain_order=True)
        .agg(
            pl.len().alias("n_images"),
            ((pl.col("rank") <= 1).mean() * 100).alias("top1_accuracy"),
            ((pl.col("rank") <= 5).mean() * 100).alias("top5_accuracy"),
        )
        .rename({"query_group": "class"})
    )
    if class_names is not None:
        order = pl.DataFrame({"class": list(class_names)})
        table = order.join(table, on="class", how="inner", maintain_order="left")
    return table.select(*[pl.lit(value).alias(key) for key, value in labels.items()], pl.all())


def paired_rows(outcome_files: Iterable[str | Path], settings: StatsSettings) -> pl.DataFrame:
    """Every pair of models on the same benchmark, subset, direction, metric and cut-off:
    mean difference (A - B) on their common queries, bootstrap interval, permutation p-value.
    Median-type metrics are skipped."""
    frames = [pl.read_parquet(path) for path in outcome_files]
    frames = [frame for frame in frames if frame.height]
    if not frames:
        return pl.DataFrame(schema=dict.fromkeys(PAIRED_COLUMNS, pl.String))
    table = pl.concat(frames, how="vertical_relaxed").filter(pl.col("statistic") == "mean")
    keys = ["benchmark", "subset", "direction", "metric", "k"]
    rows = []
    for key, frame in table.group_by(keys, maintain_order=True):
        labels = dict(zip(keys, key, strict=True))
        models = sorted(frame["model"].unique().to_list())
        by_model = {
            model: frame.filter(pl.col("model") == model).select("query_id", "outcome")
            for model in models
        }
        matrix = _common_queries(by_model)
        if matrix is not None:
            tests = all_paired_tests(
                matrix,
                settings.bootstrap_samples,
                settings.permutation_samples,
                settings.seed,
                settings.confidence,
            )
            for (i, j), test in tests.items():
                means = (float(matrix[i].mean()), float(matrix[j].mean()))
                rows.append(_paired_row(labels, (models[i], models[j]), means, test))
            continue
        for model_a, model_b in itertools.combinations(models, 2):
            joined = by_model[model_a].join(
                by_model[model_b], on="query_id", how="inner", suffix="_b", maintain_order="left"
            )
            if joined.height == 0:
                continue
            test = paired_test(
                joined["outcome"].to_numpy(),
                joined["outcome_b"].to_numpy(),
                settings.bootstrap_samples,
                settings.permutation_samples,
                settings.seed,
                settings.confidence,
            )
            means = (float(joined["outcome"].mean()), float(joined["outcome_b"].mean()))
            rows.append(_paired_row(labels, (model_a, model_b), means, test))
    if not rows:
        return pl.DataFrame(schema=dict.fromkeys(PAIRED_COLUMNS, pl.String))
    return pl.DataFrame(rows, schema_overrides={"k": pl.Int64}).select(PAIRED_COLUMNS)


def _common_queries(by_model: Mapping[str, pl.DataFrame]) -> np.ndarray | None:
    """Models x queries outcomes when every model has the same queries (each once), in the
    first model's query order; None otherwise (the pairs are then joined one by one)."""
    frames = list(by_model.values())
    order = frames[0]["query_id"]
    if order.n_unique() != len(order):
        return None
    rows = []
    for frame in frames:
        if frame.height != len(order) or frame["query_id"].n_unique() != frame.height:
            return None
        aligned = pl.DataFrame({"query_id": order}).join(
            frame, on="query_id", how="left", maintain_order="left"
        )
        if aligned["outcome"].null_count():
            return None
        rows.append(aligned["outcome"].to_numpy())
    return np.vstack(rows).astype(np.float64)


def _paired_row(
    labels: Mapping[str, Any],
    models: tuple[str, str],
    means: tuple[float, float],
    test: PairedTest,
) -> dict[str, Any]:
    """One row of paired_tests.csv."""
    return {
        **labels,
        "model_a": models[0],
        "model_b": models[1],
        "value_a": means[0],
        "value_b": means[1],
        "difference": test.difference,
        "diff_low": test.low,
        "diff_high": test.high,
        "p_value": test.p_value,
        "n_queries": test.n_queries,
    }


# The BioMedFlickr notebook names the directions the other way round: its "I2T" column holds
# text queries against the image gallery (standard text_to_image), its "T2I" the reverse.
NOTEBOOK_DIRECTIONS = {"text_to_image": "I2T", "image_to_text": "T2I"}
_NOTEBOOK_METRICS = {"recall": "R"}


def notebook_columns(rows: pl.DataFrame) -> pl.DataFrame:
    """Add `notebook_column`: the BioMedFlickr notebook's column name of each row (e.g. the
    text_to_image Recall@1 row is "I2T R@1"); rows it has no name for get null."""

    def name(row: dict) -> str | None:
        direction = NOTEBOOK_DIRECTIONS.get(row["direction"])
        metric = _NOTEBOOK_METRICS.get(row["metric"])
        if direction is None or metric is None or row["k"] is None:
            return None
        return f"{direction} {metric}@{row['k']}"

    names = [name(row) for row in rows.select("direction", "metric", "k").iter_rows(named=True)]
    return rows.with_columns(pl.Series("notebook_column", names, dtype=pl.String))
