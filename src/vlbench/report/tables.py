"""Collect per-job metric files into the long metrics tables and one Markdown table per benchmark.

``metrics.csv`` keeps exactly the contract columns (``METRIC_COLUMNS``) of every computed row;
``metrics_full.csv`` keeps every column the evaluation jobs wrote (chance level, bootstrap
bounds, flags, ...), each row's standing in its column (``STANDING_COLUMNS``: rank, rank
interval, tied with the best; vlbench.metrics.standings) and also the rows of metrics that could
not be computed (a few-shot k with a class smaller than k: no value, the reason in
``not_computable``).
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from vlbench.atomic import atomic_path, write_text
from vlbench.metrics.fewshot_job import FEWSHOT_METRIC
from vlbench.metrics.fold_rows import NOT_COMPUTABLE_COLUMN, PROBE_METRICS
from vlbench.metrics.rows import METRIC_COLUMNS, StatsSettings, notebook_columns
from vlbench.metrics.specs import RANK_METRICS
from vlbench.metrics.standings import COLUMN_KEYS, marked_best, standings_table
from vlbench.protocols import direction_label

# How a column names its unit (the `unit` column of metrics_full.csv; percent when absent).
UNIT_LABELS = {"percent": "%", "rank": "rank"}
# A benchmark table's cell of a metric that could not be computed.
NOT_COMPUTABLE_CELL = "not computable"


def collect(paths: Iterable[str | Path]) -> pl.DataFrame:
    """Concatenate per-job metric CSVs in a stable order (chance column kept); a column only
    some files have (few-shot fold statistics) is empty in the others' rows."""
    frames = [pl.read_csv(path) for path in paths]
    table = pl.concat(frames, how="diagonal_relaxed")
    return table.sort(["benchmark", "subset", "model", "direction", "metric", "k"])


def computed(table: pl.DataFrame) -> pl.DataFrame:
    """The rows that have a value (not the not-computable ones)."""
    return table.filter(pl.col("value").is_not_null())


def not_computable(table: pl.DataFrame) -> list[dict[str, str]]:
    """One record per (benchmark, subset, metric, k) that could not be computed: the models it
    concerns and why (the `not_computable` column of the metric files)."""
    if NOT_COMPUTABLE_COLUMN not in table.columns:
        return []
    rows = table.filter(
        pl.col(NOT_COMPUTABLE_COLUMN).is_not_null() & (pl.col(NOT_COMPUTABLE_COLUMN) != "")
    )
    grouped = (
        rows.group_by(
            ["benchmark", "subset", "metric", "k", NOT_COMPUTABLE_COLUMN], maintain_order=True
        )
        .agg(pl.col("model").unique().sort())
        .sort(["benchmark", "subset", "metric", "k"])
    )
    return [
        {
            "benchmark": row["benchmark"],
            "subset": row["subset"],
            "cell": f"{row['metric']}@{row['k']}",
            "models": ", ".join(row["model"]),
            "reason": row[NOT_COMPUTABLE_COLUMN],
        }
        for row in grouped.iter_rows(named=True)
    ]


def write_metrics_csv(table: pl.DataFrame, path: str | Path) -> None:
    """The long-format contract: exactly METRIC_COLUMNS of every computed row, in percent."""
    with atomic_path(path) as tmp:
        computed(table).select(METRIC_COLUMNS).write_csv(tmp)


def write_full_metrics_csv(table: pl.DataFrame, path: str | Path) -> None:
    """The contract columns first, then every extra column the evaluation jobs wrote."""
    extra = [name for name in table.columns if name not in METRIC_COLUMNS]
    with atomic_path(path) as tmp:
        table.select([*METRIC_COLUMNS, *extra]).write_csv(tmp)


def read_full_metrics(path: str | Path) -> pl.DataFrame:
    """Read metrics_full.csv with the types the tables need (k may be empty)."""
    return pl.read_csv(
        path,
        schema_overrides={"k": pl.Int64, "subset": pl.String, "n_queries": pl.Int64},
        infer_schema_length=None,
    )


def column_label(
    subset: str | None, direction: str, metric: str, k: int | None, subsets: int, unit: str
) -> str:
    name = "R" if metric == "recall" else metric
    label = f"{direction_label(direction)} {name}"
    label = label if k is None else f"{label}@{k}"
    label = f"{label} ({UNIT_LABELS.get(unit, unit)})"
    return f"{subset} {label}" if subsets > 1 else label


def metric_unit(row: dict | None, metric: str) -> str:
    """A metric's unit: its row's `unit` column, else by name (files written before it)."""
    if row is not None and row.get("unit"):
        return str(row["unit"])
    return "rank" if metric in RANK_METRICS else "percent"


def _value_with_ci(row: dict) -> str:
    if row.get("value") is None:
        return NOT_COMPUTABLE_CELL if row.get(NOT_COMPUTABLE_COLUMN) else ""
    value = f"**{row['value']:.2f}**" if marked_best(row) else f"{row['value']:.2f}"
    if row.get("ci_low") is None or row.get("ci_high") is None:
        return value
    return f"{value} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"


BENCHMARK_LEGEND = (
    "Each column names its unit: (%) percent, (rank) the 1-based rank of the first relevant "
    "item (lower is better). Recall@k is the hit rate: a query scores when any relevant item is "
    "in its top k. Brackets hold the 95% t-interval over queries. The chance row is the "
    "expected value under a random ranking. Bold: the best model of the column and every model "
    "not significantly worse than it on the same queries (one-sided paired sign-flip "
    "permutation test against the best, Holm-corrected across the column's models, at the "
    "configured confidence; results/tables/standings.csv holds the ranks with their intervals)."
)


FEWSHOT_LEGEND = (
    "Few-shot rows (image→image fewshot_accuracy@k, k support images per class): the mean "
    "accuracy over the folds; their brackets hold the t-interval over the folds."
)


PROBE_LEGEND = (
    "Probe rows (image→image lp_*@k: clip_benchmark's linear probe; logreg_*@k: mteb's "
    "logistic regression; k training images per class of the cached image embeddings, every "
    "other image tested, docs/probes.md): the mean over the folds; their brackets hold the "
    "t-interval over the folds."
)


def fold_legend(metrics: Iterable[str]) -> str:
    """The sentences on few-shot and probe rows for a table with these metrics (may be empty)."""
    present = set(metrics)
    sentences = [FEWSHOT_LEGEND] if FEWSHOT_METRIC in present else []
    if present & set(PROBE_METRICS):
        sentences.append(PROBE_LEGEND)
    return " ".join(sentences)


def benchmark_legend(table: pl.DataFrame, benchmark: str) -> str:
    """The legend of a benchmark's table (with the few-shot and probe sentences when it has
    such rows)."""
    metrics = table.filter(pl.col("benchmark") == benchmark)["metric"].to_list()
    return " ".join(filter(None, (BENCHMARK_LEGEND, fold_legend(metrics))))


def benchmark_grid(table: pl.DataFrame, benchmark: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a benchmark table: models x (subset, direction, metric, k), chance row."""
    rows = table.filter(pl.col("benchmark") == benchmark)
    key_columns = ["subset", "direction", "metric", "k"]
    keys = rows.select(key_columns).unique().sort(key_columns, nulls_last=True).rows()
    subsets = rows["subset"].n_unique()
    lookup = {tuple(r[c] for c in ["model", *key_columns]): r for r in rows.iter_rows(named=True)}
    first = {tuple(key): row for (_, *key), row in reversed(list(lookup.items()))}
    header = [
        "model",
        *[
            column_label(*key, subsets=subsets, unit=metric_unit(first.get(key), key[2]))
            for key in keys
        ],
    ]
    grid = []
    for model in rows["model"].unique().sort().to_list():
        cells = [
            "" if (row := lookup.get((model, *key))) is None else _value_with_ci(row)
            for key in keys
        ]
        grid.append([model, *cells])
    if "chance" in rows.columns:
        chance = []
        for key in keys:
            values = [
                row["chance"]
                for (_, *row_key), row in lookup.items()
                if tuple(row_key) == key and row["chance"] is not None
            ]
            chance.append(f"{values[0]:.2f}" if values else "")
        grid.append(["*chance*", *chance])
    return header, grid


def markdown_table(table: pl.DataFrame, benchmark: str) -> str:
    """A benchmark's metrics as Markdown: models as rows, 95% CI in brackets, chance as last row."""
    header, grid = benchmark_grid(table, benchmark)
    lines = [f"# {benchmark}", "", benchmark_legend(table, benchmark), ""]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("| " + " | ".join(["---"] + ["---:"] * (len(header) - 1)) + " |")
    lines += ["| " + " | ".join(cells) + " |" for cells in grid]
    return "\n".join(lines) + "\n"


def _html_cell(cell: str) -> str:
    """A Markdown cell as HTML: `**value**` bold, `*label*` plain."""
    if cell.startswith("**"):
        value, _, rest = cell[2:].partition("**")
        return f"<b>{html.escape(value)}</b>{html.escape(rest)}"
    return html.escape(cell.strip("*"))


def html_table(table: pl.DataFrame, benchmark: str) -> str:
    """The same table as a standalone HTML page (for the Snakemake report)."""
    header, grid = benchmark_grid(table, benchmark)
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{_html_cell(cell)}</td>" for cell in cells) + "</tr>"
        for cells in grid
    )
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(benchmark)}</title><style>body{{font-family:sans-serif}}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;"
        "text-align:right}td:first-child{text-align:left}</style></head><body>"
        f"<h2>{html.escape(benchmark)}</h2><p>{html.escape(benchmark_legend(table, benchmark))}</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></body></html>\n"
    )


# What metrics_full.csv takes from the standings (its own names where they differ).
STANDING_COLUMNS = {
    "rank": "rank",
    "rank_low": "rank_low",
    "rank_high": "rank_high",
    "tied_with_best": "tied_with_best",
    "p_holm": "p_vs_best_holm",
    "n_models": "n_models",
}


def with_standings(table: pl.DataFrame, standings: pl.DataFrame) -> pl.DataFrame:
    """The metric rows with their standing columns (empty where a row has none: few-shot rows,
    median-type metrics)."""
    picked = standings.select(
        [*COLUMN_KEYS, "model", *[pl.col(a).alias(b) for a, b in STANDING_COLUMNS.items()]]
    )
    return table.join(
        picked, on=[*COLUMN_KEYS, "model"], how="left", nulls_equal=True, maintain_order="left"
    )


def write_tables(
    metric_files: Iterable[str | Path],
    metrics_csv: str | Path,
    markdown_dir: str | Path,
    full_csv: str | Path | None = None,
    notebook_names: bool = False,
    standings: tuple[Iterable[str | Path], StatsSettings, str | Path] | None = None,
) -> pl.DataFrame:
    """Write metrics.csv, metrics_full.csv (if asked) and <benchmark>.md per benchmark present;
    return the collected rows.

    `notebook_names` adds the BioMedFlickr notebook's column names to metrics_full.csv.
    `standings`: (outcome files, settings, standings.csv): the standings of every column are
    written there and joined into the rows.
    """
    table = collect(metric_files)
    if notebook_names:
        table = notebook_columns(table)
    if standings is not None:
        outcome_files, settings, standings_csv = standings
        subsets = set(table.select("benchmark", "subset").iter_rows())
        ranked = standings_table(outcome_files, settings, subsets)
        with atomic_path(standings_csv) as tmp:
            ranked.write_csv(tmp)
        table = with_standings(table, ranked)
    write_metrics_csv(table, metrics_csv)
    if full_csv is not None:
        write_full_metrics_csv(table, full_csv)
    for benchmark in table["benchmark"].unique().sort().to_list():
        write_text(Path(markdown_dir) / f"{benchmark}.md", markdown_table(table, benchmark))
    return table
