"""Per-benchmark tables: every column names its unit (percent or rank)."""

from __future__ import annotations

import polars as pl

from vlbench.metrics.rows import METRIC_COLUMNS
from vlbench.report.tables import BENCHMARK_LEGEND, html_table, markdown_table


def metric_rows(with_unit: bool = True) -> pl.DataFrame:
    rows = [
        ("recall", 1, 12.5, "percent", 2.5),
        ("mrr", None, 20.0, "percent", None),
        ("mean_rank", None, 7.25, "rank", 20.5),
        ("median_rank", None, 5.0, "rank", 20.5),
    ]
    frame = pl.DataFrame(
        {
            "benchmark": ["b"] * len(rows),
            "subset": ["test"] * len(rows),
            "model": ["m"] * len(rows),
            "direction": ["image_to_text"] * len(rows),
            "metric": [row[0] for row in rows],
            "k": [row[1] for row in rows],
            "value": [row[2] for row in rows],
            "ci_low": [None] * len(rows),
            "ci_high": [None] * len(rows),
            "n_queries": [40] * len(rows),
            "unit": [row[3] for row in rows],
            "chance": [row[4] for row in rows],
        },
        schema_overrides={"k": pl.Int64, "ci_low": pl.Float64, "ci_high": pl.Float64},
    )
    assert set(METRIC_COLUMNS) <= set(frame.columns)
    return frame if with_unit else frame.drop("unit")


def header(text: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith("| model"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_each_column_names_its_unit() -> None:
    text = markdown_table(metric_rows(), "b")
    assert header(text) == [
        "model",
        "image→text mean_rank (rank)",
        "image→text median_rank (rank)",
        "image→text mrr (%)",
        "image→text R@1 (%)",
    ]
    assert BENCHMARK_LEGEND in text and "(rank)" in BENCHMARK_LEGEND
    assert "mean_rank (rank)" in html_table(metric_rows(), "b")


def test_tables_of_files_without_a_unit_column_name_ranks_by_metric() -> None:
    assert header(markdown_table(metric_rows(with_unit=False), "b")) == header(
        markdown_table(metric_rows(), "b")
    )
