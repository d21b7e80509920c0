"""The long tables collect few-shot rows beside the ranked metrics' rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from vlbench.metrics.fewshot import FewShotResult
from vlbench.metrics.fewshot_job import fewshot_rows
from vlbench.metrics.job import write_csv
from vlbench.metrics.rows import EXTRA_COLUMNS, METRIC_COLUMNS, StatsSettings, metric_rows
from vlbench.protocols import PROTOCOLS
from vlbench.report.tables import FEWSHOT_LEGEND, html_table, read_full_metrics, write_tables

LABELS = {"benchmark": "rare", "subset": "test", "model": "m"}


def test_fewshot_rows_join_the_tables_with_their_own_columns(tmp_path: Path) -> None:
    zeroshot = pl.DataFrame(
        [
            {
                **LABELS,
                "direction": "image_to_text",
                "metric": "zeroshot_top1_accuracy",
                "k": 1,
                "value": 40.0,
                "ci_low": 35.0,
                "ci_high": 45.0,
                "n_queries": 100,
                "unit": "percent",
                "chance": 25.0,
                "chance_flag": False,
                "boot_low": 36.0,
                "boot_high": 44.0,
                "n_tied_queries": 0,
                "tie_policy": "index",
            }
        ]
    ).select(METRIC_COLUMNS + EXTRA_COLUMNS)
    results = [FewShotResult(1, (0.5, 0.25, 0.75), 96, 4, 2, ("a",))]
    write_csv(zeroshot, tmp_path / "image_to_text.csv")
    write_csv(fewshot_rows(results, LABELS, 0.95), tmp_path / "fewshot.csv")
    write_tables(
        [tmp_path / "image_to_text.csv", tmp_path / "fewshot.csv"],
        tmp_path / "metrics.csv",
        tmp_path,
        full_csv=tmp_path / "metrics_full.csv",
    )
    assert pl.read_csv(tmp_path / "metrics.csv").columns == METRIC_COLUMNS
    full = read_full_metrics(tmp_path / "metrics_full.csv").sort("metric")
    assert full["metric"].to_list() == ["fewshot_accuracy", "zeroshot_top1_accuracy"]
    assert full["value"].to_list() == [50.0, 40.0]
    assert full["fold_std"][0] > 0 and full["fold_std"][1] is None
    assert full["boot_low"].to_list() == [None, 36.0]
    assert full["n_short_classes"].to_list() == [1, None]
    markdown = (tmp_path / "rare.md").read_text(encoding="utf-8")
    assert FEWSHOT_LEGEND in markdown and "image→image fewshot_accuracy@1" in markdown


def test_a_not_computable_k_stays_out_of_metrics_csv_and_is_named_everywhere_else(
    tmp_path: Path,
) -> None:
    """k = 5 on a set with a one-image class: no value in metrics.csv, the reason in
    metrics_full.csv, the Markdown cell and not_run.csv's rows; k = 1 is written as usual."""
    from vlbench.report.not_run import (
        not_computable_rows,
        not_computable_summary,
        read_not_run,
        write_not_run,
    )
    from vlbench.report.tables import not_computable

    reason = "k=5: 1 class(es) with fewer than 5 images: 'petrel chick' (1)"
    results = [
        FewShotResult(1, (0.5, 0.25), 30, 4, 0, ()),
        FewShotResult(5, (), 0, 4, 0, (), not_computable=reason),
    ]
    for model in ("a", "b"):
        write_csv(
            fewshot_rows(results, {**LABELS, "model": model}, 0.95), tmp_path / f"{model}.csv"
        )
    table = write_tables(
        [tmp_path / "a.csv", tmp_path / "b.csv"],
        tmp_path / "metrics.csv",
        tmp_path,
        full_csv=tmp_path / "metrics_full.csv",
    )
    assert pl.read_csv(tmp_path / "metrics.csv")["k"].to_list() == [1, 1]
    full = read_full_metrics(tmp_path / "metrics_full.csv").filter(pl.col("k") == 5)
    assert full["value"].to_list() == [None, None]
    assert full["not_computable"].to_list() == [reason, reason]
    assert "| not computable |" in (tmp_path / "rare.md").read_text(encoding="utf-8")
    records = not_computable(table)
    assert records == [
        {
            "benchmark": "rare",
            "subset": "test",
            "cell": "fewshot_accuracy@5",
            "models": "a, b",
            "reason": reason,
        }
    ]
    write_not_run(not_computable_rows(records), tmp_path / "not_run.csv")
    (line,) = not_computable_summary(read_not_run(tmp_path / "not_run.csv"), "not_run.csv")
    assert line == (
        f"vlbench: not computable: rare/test fewshot_accuracy@5: {reason}; models: a, b "
        "(listed in not_run.csv)"
    )


def test_images_a_benchmark_left_out_are_named_at_the_end_of_the_run(
    tmp_path: Path, monkeypatch
) -> None:
    """From the benchmark.json that prepare writes (tests/data: its skipped_images)."""
    import json

    from vlbench.report.not_run import skipped_images_summary

    monkeypatch.chdir(tmp_path)
    skipped = [{"image_id": f"img{i}", "reason": f"unreadable: {i}"} for i in range(5)]
    for benchmark, left_out in (("kept", []), ("lossy", skipped)):
        folder = tmp_path / "results" / "data" / benchmark
        folder.mkdir(parents=True)
        meta = {"n_source_images": 40, "n_skipped_images": len(left_out)}
        (folder / "benchmark.json").write_text(json.dumps(meta | {"skipped_images": left_out}))
    (line,) = skipped_images_summary(["kept", "lossy", "not-prepared"])
    assert line == (
        "vlbench: lossy: 5 of 40 images left out (image_policy: skip): img0: unreadable: 0; "
        "img1: unreadable: 1; img2: unreadable: 2; and 2 more (listed in "
        "results/data/lossy/benchmark.json, skipped_images)"
    )


def test_tables_mark_the_models_tied_with_the_best(tmp_path: Path) -> None:
    """Three models on the same 200 queries: `a` best, `b` equal to it on all but two queries,
    `c` far behind; the standings join metrics_full.csv and the tables bold `a` and `b` only."""
    rng = np.random.default_rng(0)
    best = (rng.uniform(size=200) < 0.7).astype(float) * 100
    near = best.copy()
    near[np.flatnonzero(best)[:2]] = 0.0
    far = best * (rng.uniform(size=200) < 0.3)
    metric_files, outcome_files = [], []
    for model, hits in (("a", best), ("b", near), ("c", far)):
        outcomes = pl.DataFrame(
            {
                "metric": "recall",
                "k": pl.Series([1] * 200, dtype=pl.Int64),
                "unit": "percent",
                "statistic": "mean",
                "query_id": [f"q{i}" for i in range(200)],
                "query_group": pl.Series([None] * 200, dtype=pl.String),
                "outcome": hits,
                "chance": 0.5,
                "tied": False,
            }
        )
        labels = {"benchmark": "pairs", "subset": "test", "model": model}
        rows = metric_rows(
            outcomes, PROTOCOLS["paired"], **labels, direction="text_to_image", tie_policy="index"
        )
        write_csv(rows, tmp_path / f"{model}.csv")
        outcomes.with_columns(
            *(pl.lit(value).alias(name) for name, value in labels.items()),
            direction=pl.lit("text_to_image"),
        ).write_parquet(tmp_path / f"{model}.outcomes.parquet")
        metric_files.append(tmp_path / f"{model}.csv")
        outcome_files.append(tmp_path / f"{model}.outcomes.parquet")
    write_tables(
        metric_files,
        tmp_path / "metrics.csv",
        tmp_path,
        full_csv=tmp_path / "metrics_full.csv",
        standings=(outcome_files, StatsSettings(0.95, 200, 2000, 0), tmp_path / "standings.csv"),
    )
    full = read_full_metrics(tmp_path / "metrics_full.csv").sort("model")
    assert full["tied_with_best"].to_list() == [True, True, False]
    assert full["rank"].to_list() == [1, 2, 3] and full["n_models"].to_list() == [3, 3, 3]
    assert pl.read_csv(tmp_path / "metrics.csv").columns == METRIC_COLUMNS
    markdown = (tmp_path / "pairs.md").read_text(encoding="utf-8")
    rows = {line.split(" | ")[0].strip("| "): line for line in markdown.splitlines()}
    a, b, c = full["value"].to_list()
    assert f"| **{a:.2f}** [" in rows["a"] and f"| **{b:.2f}** [" in rows["b"]
    assert f"| {c:.2f} [" in rows["c"] and "Bold: the best model" in markdown
    assert f"<b>{a:.2f}</b> [" in html_table(full, "pairs")
