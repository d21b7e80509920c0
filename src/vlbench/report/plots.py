"""Per-benchmark plots of the metrics table: Recall@k curves and per-model bars with 95% CIs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from vlbench.atomic import atomic_path
from vlbench.metrics.specs import RANK_METRICS
from vlbench.protocols import direction_sides


def direction_title(direction: str) -> str:
    """A plot panel's direction: `image → text (image queries)`."""
    query, gallery = direction_sides(direction)
    return f"{query} → {gallery} ({query} queries)" if gallery else direction


def save_figure(figure: Figure, path: str | Path) -> None:
    """Write a PNG atomically (Figure objects render with Agg; no pyplot state is involved)."""
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=110, bbox_inches="tight")


def _empty_figure(message: str) -> Figure:
    figure = Figure(figsize=(6, 2))
    axis = figure.subplots()
    axis.axis("off")
    axis.text(0.5, 0.5, message, ha="center", va="center")
    return figure


def _chance_by_k(rows: pl.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    if "chance" not in rows.columns:
        return None
    chance = (
        rows.filter(pl.col("chance").is_not_null())
        .group_by("k")
        .agg(pl.col("chance").first())
        .sort("k")
    )
    if chance.height == 0:
        return None
    return chance["k"].to_numpy(), chance["chance"].to_numpy()


def recall_curves(metrics: pl.DataFrame, benchmark: str) -> Figure:
    """Recall@k against k (log axis), one panel per direction, every model, chance dashed."""
    rows = metrics.filter(
        (pl.col("benchmark") == benchmark)
        & (pl.col("metric") == "recall")
        & pl.col("k").is_not_null()
    )
    if rows.height == 0:
        return _empty_figure(f"{benchmark}: no Recall@k rows")
    panels = sorted(rows.select("subset", "direction").unique().rows())
    figure = Figure(figsize=(5 * len(panels), 4.3), layout="constrained")
    axes = figure.subplots(1, len(panels), squeeze=False, sharey=True)
    models = sorted(rows["model"].unique().to_list())
    for axis, (subset, direction) in zip(axes[0], panels, strict=True):
        panel = rows.filter((pl.col("subset") == subset) & (pl.col("direction") == direction))
        for model in models:
            line = panel.filter(pl.col("model") == model).sort("k")
            if line.height == 0:
                continue
            k = line["k"].to_numpy()
            drawn = axis.plot(k, line["value"].to_numpy(), marker="o", label=model)
            axis.fill_between(
                k,
                line["ci_low"].to_numpy(),
                line["ci_high"].to_numpy(),
                color=drawn[0].get_color(),
                alpha=0.15,
                linewidth=0,
            )
        chance = _chance_by_k(panel)
        if chance is not None:
            axis.plot(*chance, linestyle="--", color="grey", label="chance")
        axis.set_xscale("log")
        axis.set_xlabel("k")
        axis.set_title(f"{direction_title(direction)}\n{subset}", fontsize=10)
        axis.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("Recall@k (%)")
    axes[0][-1].legend(fontsize=8, loc="upper left")
    figure.suptitle(f"{benchmark}: Recall@k with 95% intervals")
    return figure


def _group_label(subset: str, direction: str, metric: str, k: int | None, subsets: int) -> str:
    query, gallery = direction_sides(direction)
    short = f"{query[0]}→{gallery[0]}" if gallery else direction
    name = metric if k is None else f"{metric}@{k}"
    return f"{subset}\n{short} {name}" if subsets > 1 else f"{short} {name}"


def model_bars(metrics: pl.DataFrame, benchmark: str) -> Figure:
    """One group per (direction, metric, k), one bar per model with its 95% interval."""
    rows = metrics.filter(
        (pl.col("benchmark") == benchmark)
        # Metrics not on the 0-100 percent scale stay out of the bar charts.
        & ~pl.col("metric").is_in(list(RANK_METRICS))
        & pl.col("value").is_not_null()  # not the metrics that could not be computed
    )
    if rows.height == 0:
        return _empty_figure(f"{benchmark}: no metric rows")
    key = ["subset", "direction", "metric", "k"]
    groups = rows.select(key).unique().sort(key, nulls_last=True).rows()
    models = sorted(rows["model"].unique().to_list())
    subsets = rows["subset"].n_unique()
    width = 0.8 / len(models)
    figure = Figure(figsize=(min(max(6.0, 0.35 * len(groups) * len(models) + 2), 24), 4))
    axis = figure.subplots()
    lookup = {tuple(row[c] for c in ["model", *key]): row for row in rows.iter_rows(named=True)}
    for m, model in enumerate(models):
        positions, values, errors = [], [], [[], []]
        for g, group in enumerate(groups):
            row = lookup.get((model, *group))
            if row is None:
                continue
            value = row["value"]
            low = row["ci_low"] if row["ci_low"] is not None else value
            high = row["ci_high"] if row["ci_high"] is not None else value
            positions.append(g - 0.4 + width * (m + 0.5))
            values.append(value)
            errors[0].append(max(value - low, 0.0))
            errors[1].append(max(high - value, 0.0))
        axis.bar(positions, values, width, yerr=errors, capsize=2, label=model)
    if "chance" in rows.columns:
        for g, group in enumerate(groups):
            chance = [
                row["chance"]
                for (_, *row_key), row in lookup.items()
                if tuple(row_key) == group and row["chance"] is not None
            ]
            if chance:
                axis.hlines(chance[0], g - 0.45, g + 0.45, colors="black", linestyles="--")
        axis.plot([], [], "k--", label="chance")
    axis.set_xticks(range(len(groups)))
    axis.set_xticklabels(
        [_group_label(*group, subsets=subsets) for group in groups], fontsize=8, rotation=30
    )
    axis.set_ylabel("value (%)")
    axis.set_title(f"{benchmark}: per-model results with 95% intervals")
    axis.legend(fontsize=8)
    axis.grid(True, axis="y", alpha=0.3)
    return figure


def write_benchmark_plots(
    metrics: pl.DataFrame, benchmark: str, curves_png: str | Path, bars_png: str | Path
) -> None:
    """Both per-benchmark figures as PNG files."""
    save_figure(recall_curves(metrics, benchmark), curves_png)
    save_figure(model_bars(metrics, benchmark), bars_png)
