"""Collect per-job metric files into the long metrics table and one Markdown table per benchmark."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import polars as pl

from vlbench.atomic import atomic_path, write_text
from vlbench.retrieval import METRIC_COLUMNS

DIRECTION_LABELS = {"image_to_text": "image→text", "text_to_image": "text→image"}


def collect(paths: Iterable[str | Path]) -> pl.DataFrame:
    """Concatenate per-job metric CSVs in a stable order (chance column kept)."""
    frames = [pl.read_csv(path) for path in paths]
    table = pl.concat(frames, how="vertical_relaxed")
    return table.sort(["benchmark", "subset", "model", "direction", "metric", "k"])


def write_metrics_csv(table: pl.DataFrame, path: str | Path) -> None:
    """The long-format contract: exactly METRIC_COLUMNS, values in percent."""
    with atomic_path(path) as tmp:
        table.select(METRIC_COLUMNS).write_csv(tmp)


def _column(direction: str, metric: str, k: int) -> str:
    return (
        f"{DIRECTION_LABELS.get(direction, direction)} {'R' if metric == 'recall' else metric}@{k}"
    )


def markdown_table(table: pl.DataFrame, benchmark: str) -> str:
    """Models as rows, direction x k as columns, 95% CI in brackets, chance level as last row."""
    rows = table.filter(pl.col("benchmark") == benchmark)
    keys = rows.select("direction", "metric", "k").unique().sort("direction", "metric", "k").rows()
    header = ["model", *[_column(*key) for key in keys]]
    lines = [
        f"# {benchmark}",
        "",
        "Recall@k is the hit rate in percent: a query scores when any relevant item is in its "
        "top k. Brackets hold the 95% t-interval over queries. The chance row is the expected "
        "value under a "
        "random ranking.",
        "",
        "| " + " | ".join(header) + " |",
        "| " + " | ".join(["---"] + ["---:"] * len(keys)) + " |",
    ]
    lookup = {
        (r["model"], r["direction"], r["metric"], r["k"]): r for r in rows.iter_rows(named=True)
    }
    for model in rows["model"].unique().sort().to_list():
        cells = []
        for direction, metric, k in keys:
            row = lookup.get((model, direction, metric, k))
            cells.append(
                ""
                if row is None
                else f"{row['value']:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"
            )
        lines.append("| " + " | ".join([model, *cells]) + " |")
    if "chance" in rows.columns:
        chance = []
        for direction, metric, k in keys:
            values = rows.filter(
                (pl.col("direction") == direction)
                & (pl.col("metric") == metric)
                & (pl.col("k") == k)
            )["chance"]
            chance.append(f"{values[0]:.2f}" if len(values) else "")
        lines.append("| " + " | ".join(["*chance*", *chance]) + " |")
    return "\n".join(lines) + "\n"


def write_tables(
    metric_files: Iterable[str | Path], metrics_csv: str | Path, markdown_dir: str | Path
) -> None:
    """Write metrics.csv and <benchmark>.md for every benchmark present."""
    table = collect(metric_files)
    write_metrics_csv(table, metrics_csv)
    for benchmark in table["benchmark"].unique().sort().to_list():
        write_text(Path(markdown_dir) / f"{benchmark}.md", markdown_table(table, benchmark))
