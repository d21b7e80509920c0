"""A static leaderboard page (results/leaderboard.html): each paper table's coverage line, the
paper tables (ours beside published) and one table per benchmark with intervals, ranks and the
models tied with the best. Every table sorts by any header; the model filter hides rows of every
table, the benchmark filter hides the other benchmarks' tables (the paper tables stay).

The page needs no server and loads nothing: its data is one embedded JSON block that a small
script (leaderboard.js, inlined) renders with DOM calls, so no text from the data is ever parsed
as HTML.
"""

from __future__ import annotations

import csv
import html
import json
import math
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl

from vlbench.atomic import write_text
from vlbench.errors import VlbenchError
from vlbench.metrics.fold_rows import NOT_COMPUTABLE_COLUMN
from vlbench.metrics.standings import marked_best
from vlbench.report.table_writers import (
    CHANCE_OURS,
    CHANCE_PUBLISHED,
    DASH,
    NOT_COMPUTABLE,
    TOLERANCE_MARK,
)
from vlbench.report.tables import (
    column_label,
    fold_legend,
    metric_unit,
    read_full_metrics,
)

TITLE = "vlbench leaderboard"
BEST_MARK = "★"
PAPER_KEYS = ("row", "model_key", "reference_model")
# The parts of one column of a paper table's CSV, in its order ("<label> <part>").
PAPER_PARTS = (
    "ours",
    "ci_low",
    "ci_high",
    "published",
    "difference",
    "beyond_tolerance",
    "tied_with_best",
)
BENCHMARK_LEGEND = (
    "Each cell: our value, its 95% interval over queries as a bar (hover for the numbers) and "
    "its rank in the column with the rank interval, the central interval of the model's ranks "
    "over query bootstrap resamples. Bold with " + BEST_MARK + ": the best model of the column "
    "and every model not significantly worse than it (one-sided paired sign-flip permutation "
    "test against the best, Holm-corrected across the column's models, at the configured "
    "confidence). (%) columns are percent, (rank) columns the rank of the first relevant item "
    "(lower is better); the last row is the chance level, " + NOT_COMPUTABLE + " a metric that "
    "cannot be computed on the data (hover for why)."
)
PAPER_LEGEND = (
    "Ours (with its 95% interval as a bar), the published value and the difference (ours - "
    "published) in percentage points; " + TOLERANCE_MARK + " marks a difference beyond the "
    "table's tolerance; bold with " + BEST_MARK + ": ours is the best of our models in that "
    "column or not significantly worse than it. " + DASH + " where a value is missing."
)
STYLE = """
body{font:13px/1.35 system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px 20px;color:#222}
h1{font-size:1.45em;margin:0 0 .3em}h2{font-size:1.15em;margin:1.1em 0 .3em}
h3{font-size:1em;margin:.9em 0 .25em}
#controls{display:flex;gap:1.5em;align-items:center;margin:.4em 0 .6em}
#coverage{margin:.2em 0;padding-left:1.2em}
.legend{color:#555;max-width:75em;font-size:.92em;margin:.2em 0 .4em}
.scroll{overflow-x:auto}table.board{border-collapse:collapse;margin:.2em 0 .4em}
.board th,.board td{border:1px solid #dcdfe3;padding:3px 6px;text-align:right;vertical-align:top}
.board th{background:#f1f3f5;cursor:pointer;user-select:none;max-width:8.5em}
.board th[aria-sort=ascending]::after{content:" \\25B2"}
.board th[aria-sort=descending]::after{content:" \\25BC"}
.board .label,.board .flags{text-align:left}td.label{white-space:nowrap}
td.flags{color:#8a5a00}
.board tbody tr:nth-child(even){background:#fafbfc}
.board tfoot td{color:#777;font-style:italic}
td.best{font-weight:700;background:#e9f6ec}.mark{color:#1a7f37;margin-left:2px}
td.beyond{background:#fdecea;color:#b42318}.nc{color:#999}
.bar{display:block;position:relative;height:6px;width:72px;margin:3px 0 2px auto;
background:#eceef1;border-radius:3px}
.bar .ci{position:absolute;top:0;height:100%;background:#9cc3e6;border-radius:3px}
.bar .pt{position:absolute;top:-2px;width:2px;height:10px;margin-left:-1px;background:#1f4e79}
.rank{display:block;color:#666;font-size:.85em;font-weight:400;white-space:nowrap}
[hidden]{display:none!important}
"""
PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<link rel="icon" href="data:,"><style>{style}</style></head>
<body><h1>{title}</h1>
<div id="controls"><label>Model <input id="model-filter" list="model-list"
placeholder="all models" autocomplete="off"></label><datalist id="model-list"></datalist>
<label>Benchmark <select id="benchmark-filter"><option value="">all benchmarks</option>
</select></label></div>
<noscript>This page is drawn by JavaScript; the tables are in results/tables/.</noscript>
<h2>Paper tables</h2><ul id="coverage"></ul><div id="papers"></div>
<h2>Benchmarks</h2><p class="legend">{legend}</p><div id="benchmarks"></div>
<script type="application/json" id="leaderboard-data">{data}</script>
<script>{script}</script>
</body></html>
"""


def _number(value: Any) -> float | None:
    """A finite float, else None (JSON has no NaN)."""
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def coverage_entry(path: str | Path) -> dict[str, str]:
    """A paper table's coverage record: its table, title and line (the `summary` field if
    present, else the `line` field, else the record in short)."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise VlbenchError(f"{path}: not a paper table coverage record ({exc})") from exc
    if not isinstance(record, dict):
        raise VlbenchError(f"{path}: not a paper table coverage record (not a JSON object)")
    table = str(record.get("table") or Path(path).name.removesuffix(".coverage.json"))
    title = str(record.get("title") or table)
    if record.get("summary"):
        text = f"{title}: {record['summary']}"
    elif record.get("line"):
        text = str(record["line"])
    else:
        rest = {k: v for k, v in record.items() if k not in ("table", "title")}
        text = f"{title}: " + "; ".join(
            f"{key} {json.dumps(value, ensure_ascii=False)}" for key, value in rest.items()
        )
    return {"table": table, "title": title, "text": text}


def paper_entry(path: str | Path, title: str | None = None) -> dict[str, Any]:
    """A paper table (its wide CSV): column labels and, per row, each column's parts."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            header = list(reader.fieldnames or [])
            records = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise VlbenchError(f"{path}: not a paper table CSV ({exc})") from exc
    if header[:3] != list(PAPER_KEYS):
        raise VlbenchError(f"{path}: not a paper table CSV (its columns start {header[:3]})")
    labels = [name.removesuffix(" ours") for name in header[3:] if name.endswith(" ours")]
    rows = []
    for record in records:
        cells = []
        for label in labels:
            part = {name: record.get(f"{label} {name}") or "" for name in PAPER_PARTS}
            cells.append(
                {
                    "value": _number(part["ours"]),
                    "lo": _number(part["ci_low"]),
                    "hi": _number(part["ci_high"]),
                    "published": part["published"],
                    "difference": _number(part["difference"]),
                    "beyond": part["beyond_tolerance"] == "true",
                    "best": part["tied_with_best"] == "true",
                }
            )
        flags = [CHANCE_OURS] if record.get("ours_at_chance") == "true" else []
        flags += [CHANCE_PUBLISHED] if record.get("published_at_chance") == "true" else []
        rows.append(
            {
                "label": record.get("row") or "",
                "model": record.get("model_key") or "",
                "reference": record.get("reference_model") or "",
                "cells": cells,
                "flags": flags,
            }
        )
    name = Path(path).stem
    return {"name": name, "title": title or name, "labels": labels, "rows": rows}


def _benchmark_cell(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "value": _number(row.get("value")),
        "lo": _number(row.get("ci_low")),
        "hi": _number(row.get("ci_high")),
        "rank": _number(row.get("rank")),
        "rank_lo": _number(row.get("rank_low")),
        "rank_hi": _number(row.get("rank_high")),
        "best": marked_best(row),
        "nc": str(row.get(NOT_COMPUTABLE_COLUMN) or ""),
    }


def benchmark_entry(table: pl.DataFrame, benchmark: str) -> dict[str, Any]:
    """A benchmark's grid: models x (subset, direction, metric, k) columns, and chance levels."""
    rows = table.filter(pl.col("benchmark") == benchmark)
    key_columns = ["subset", "direction", "metric", "k"]
    keys = rows.select(key_columns).unique().sort(key_columns, nulls_last=True).rows()
    subsets = rows["subset"].n_unique()
    by_key: dict[tuple, dict[str, dict[str, Any]]] = {key: {} for key in keys}
    for row in rows.iter_rows(named=True):
        by_key[tuple(row[c] for c in key_columns)].setdefault(row["model"], row)
    columns, chance = [], []
    for key, models in by_key.items():
        unit = metric_unit(next(iter(models.values()), None), key[2])
        columns.append(column_label(*key, subsets=subsets, unit=unit))
        levels = [_number(row.get("chance")) for row in models.values()]
        chance.append(next((level for level in levels if level is not None), None))
    grid = [
        {
            "model": model,
            "cells": [
                None if (row := by_key[key].get(model)) is None else _benchmark_cell(row)
                for key in keys
            ],
        }
        for model in rows["model"].unique().sort().to_list()
    ]
    return {
        "name": benchmark,
        "columns": columns,
        "rows": grid,
        "chance": chance if any(level is not None for level in chance) else None,
        "note": fold_legend(rows["metric"].to_list()),
    }


def leaderboard_data(
    metrics_full: str | Path,
    paper_csvs: Sequence[str | Path],
    coverage_jsons: Sequence[str | Path],
) -> dict[str, Any]:
    """Everything the page shows, as plain JSON-ready data."""
    coverage = [coverage_entry(path) for path in coverage_jsons]
    titles = {entry["table"]: entry["title"] for entry in coverage}
    papers = [paper_entry(path, titles.get(Path(path).stem)) for path in paper_csvs]
    table = read_full_metrics(metrics_full)
    benchmarks = [benchmark_entry(table, name) for name in table["benchmark"].unique().sort()]
    return {
        "coverage": coverage,
        "papers": papers,
        "paper_legend": PAPER_LEGEND,
        "benchmarks": benchmarks,
        "marks": {
            "best": BEST_MARK,
            "beyond": TOLERANCE_MARK,
            "dash": DASH,
            "nc": NOT_COMPUTABLE,
        },
    }


def embedded_json(data: dict[str, Any]) -> str:
    """The data as JSON that cannot end its <script> block: <, > and & as \\u escapes."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_page(data: dict[str, Any]) -> str:
    """The whole page: template, style, embedded data and the script that draws it."""
    script = resources.files("vlbench.report").joinpath("leaderboard.js").read_text("utf-8")
    return PAGE.format(
        title=html.escape(TITLE),
        style=STYLE.strip(),
        legend=html.escape(BENCHMARK_LEGEND),
        data=embedded_json(data),
        script=script,
    )


def write_leaderboard(
    metrics_full: str | Path,
    paper_csvs: Sequence[str | Path],
    coverage_jsons: Sequence[str | Path],
    out: str | Path,
) -> None:
    """Write the leaderboard page of metrics_full.csv and the paper tables to `out`."""
    write_text(out, render_page(leaderboard_data(metrics_full, paper_csvs, coverage_jsons)))
