"""Join our metric rows with the published cells of a paper table, with differences and flags."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

from vlbench.errors import VlbenchError
from vlbench.metrics.fold_rows import NOT_COMPUTABLE_COLUMN
from vlbench.metrics.standings import marked_best
from vlbench.metrics.statistics import wilson_low
from vlbench.report.coverage import table_coverage
from vlbench.report.paper_layouts import Column, PaperLayout
from vlbench.report.paper_table_model import Cell, PaperTable, Row
from vlbench.report.reference import PublishedValue, ReferenceMap, published_lookup

# Printed cells carry one or two decimals, so a printed mean may differ from the mean of the
# printed cells by up to half a unit in its last place without being wrong.
MEAN_ROUNDING_SLACK = 0.05


def _value(row: Mapping[str, Any], name: str) -> float | None:
    value = row.get(name)
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _reference_subset(row: Mapping[str, Any], fixed: str | None) -> str:
    """The reference subset a metric row stands for: fixed by the map, its group, or its subset."""
    if fixed is not None:
        return fixed
    group = row.get("group")
    return str(group) if group not in (None, "") else str(row["subset"])


def _coordinates(benchmark: str, subset: str, direction: str, metric: str) -> tuple[str, ...]:
    """A cell's coordinates; subsets compare without regard to case (`Appearance`, `appearance`)."""
    return (benchmark, subset.casefold(), direction, metric)


def _combined_row(parts: list[Mapping[str, Any]]) -> dict[str, Any]:
    """A column that averages subsets: the mean value and chance level, the summed query count
    (no interval: the parts' intervals do not combine into one)."""
    values = [_value(part, "value") for part in parts]
    chances = [_value(part, "chance") for part in parts]
    counts = [part.get("n_queries") for part in parts]
    return {
        "value": None if None in values else sum(values) / len(values),  # type: ignore[arg-type]
        "chance": None if None in chances else sum(chances) / len(chances),  # type: ignore[arg-type]
        "n_queries": None if None in counts else sum(int(n) for n in counts),  # type: ignore[arg-type]
        "k": parts[0]["k"],
    }


def match_metric_rows(
    metrics: pl.DataFrame, layout: PaperLayout, mapping: ReferenceMap
) -> dict[tuple[str, int], dict[str, Any]]:
    """Our metric row for each (model key, column index); an exact k beats a row without k.

    A column with `parts` gets the combination of our rows for all of its subsets (none while
    one is missing).
    """
    by_coordinates: dict[tuple[str, ...], list[tuple[int, str]]] = {}
    for index, column in enumerate(layout.columns):
        for part in column.parts or (column.subset,):
            coordinates = _coordinates(column.benchmark, part, column.direction, column.metric)
            by_coordinates.setdefault(coordinates, []).append((index, part))
    found: dict[tuple[str, int, str], dict[str, Any]] = {}
    owner: dict[tuple[str, int, str], str] = {}
    for row in metrics.iter_rows(named=True):
        ref = mapping.benchmark(row["benchmark"])
        coordinates = _coordinates(
            ref.reference, _reference_subset(row, ref.subset), row["direction"], row["metric"]
        )
        k = None if row["k"] is None else int(row["k"])
        for index, part in by_coordinates.get(coordinates, []):
            column = layout.columns[index]
            if k is not None and k != column.k:
                continue
            key = (row["model"], index, part)
            previous = found.get(key)
            if previous is not None and owner[key] != row["benchmark"]:
                raise VlbenchError(
                    f"tables: benchmarks {owner[key]!r} and {row['benchmark']!r} both fill "
                    f"column {column.label!r} of {layout.table} for model {row['model']!r}; "
                    "map only one of them to it"
                )
            if previous is None or (previous["k"] is None and k is not None):
                found[key] = row
                owner[key] = row["benchmark"]
    cells: dict[tuple[str, int], dict[str, Any]] = {}
    for model in sorted({model for model, _, _ in found}):
        for index, column in enumerate(layout.columns):
            if not column.parts:
                if (model, index, column.subset) in found:
                    cells[(model, index)] = found[(model, index, column.subset)]
                continue
            parts = [found.get((model, index, part)) for part in column.parts]
            if all(part is not None for part in parts):
                cells[(model, index)] = _combined_row(parts)  # type: ignore[arg-type]
    return cells


def missing_parts(
    metrics: pl.DataFrame, layout: PaperLayout, mapping: ReferenceMap
) -> dict[int, list[str]]:
    """For each column that averages subsets: the subsets no benchmark of ours stands for."""
    present = {
        _coordinates(
            mapping.benchmark(row["benchmark"]).reference,
            _reference_subset(row, mapping.benchmark(row["benchmark"]).subset),
            row["direction"],
            row["metric"],
        )
        for row in metrics.iter_rows(named=True)
    }
    return {
        index: [
            part
            for part in column.parts
            if _coordinates(column.benchmark, part, column.direction, column.metric) not in present
        ]
        for index, column in enumerate(layout.columns)
        if column.parts
    }


def _published_columns(
    layout: PaperLayout, mapping: ReferenceMap, benchmark_keys: Iterable[str]
) -> list[bool]:
    """Whether each column shows published values: a configured key maps to it with published on."""
    refs = [mapping.benchmark(key) for key in benchmark_keys]
    return [
        any(
            ref.published
            and ref.reference == column.benchmark
            and (
                ref.subset is None
                or ref.subset.casefold()
                in {subset.casefold() for subset in (column.subset, *column.parts)}
            )
            for ref in refs
        )
        for column in layout.columns
    ]


def _reference_models(layout: PaperLayout, values: Iterable[PublishedValue]) -> list[str]:
    names: list[str] = []
    for value in values:
        if value.table == layout.table and value.model not in names:
            names.append(value.model)
    return names


def _fill_cell(
    row: Mapping[str, Any] | None,
    published: PublishedValue | None,
    column_stats: tuple[float | None, int | None],
    tolerance: float,
) -> Cell:
    chance, n_queries = column_stats
    cell = Cell(chance=chance, n_queries=n_queries)
    if row is not None:
        cell.ours = _value(row, "value")
        cell.not_computable = str(row.get(NOT_COMPUTABLE_COLUMN) or "") if cell.ours is None else ""
        cell.ci_low = _value(row, "ci_low")
        cell.ci_high = _value(row, "ci_high")
        cell.tied_with_best = cell.ours is not None and marked_best(row)
        if cell.ours is not None and chance is not None:
            low = cell.ci_low if cell.ci_low is not None else cell.ours
            cell.ours_at_chance = low <= chance + 1e-9
    if published is not None:
        cell.published = published.value
        cell.published_text = published.printed
        if chance is not None and n_queries:
            cell.published_at_chance = wilson_low(published.value, n_queries) <= chance + 1e-9
    difference = cell.difference
    cell.beyond_tolerance = difference is not None and abs(difference) > tolerance + 1e-9
    return cell


def _column_stats(
    found: Mapping[tuple[str, int], Mapping[str, Any]], n_columns: int
) -> list[tuple[float | None, int | None]]:
    """Chance level and query count per column, from any model's row (they are benchmark-level)."""
    stats: list[tuple[float | None, int | None]] = [(None, None)] * n_columns
    for (_, index), row in sorted(found.items(), key=lambda item: item[0]):
        if stats[index] == (None, None):
            n = row.get("n_queries")
            stats[index] = (_value(row, "chance"), None if n is None else int(n))
    return stats


def _mean_cell(table: PaperTable, row: Row, lookup: Mapping, published_on: bool) -> Cell:
    """The mean column: ours and the printed mean; an inconsistent printed mean gets a note."""
    mean = table.layout.mean
    assert mean is not None
    parts = [row.cells[table.labels.index(label)] for label in mean.of]
    cell = Cell()
    ours = [part.ours for part in parts]
    if all(value is not None for value in ours):
        cell.ours = sum(ours) / len(ours)  # type: ignore[arg-type]
    elif any(part.not_computable for part in parts):
        cell.not_computable = "a column of the mean is not computable"
    if row.reference_model is None or not published_on:
        return cell
    printed = lookup.get(
        (
            table.layout.table,
            row.reference_model,
            mean.benchmark,
            mean.subset,
            mean.direction,
            mean.metric,
            mean.k,
        )
    )
    published_parts = [part.published for part in parts]
    recomputed = (
        sum(published_parts) / len(published_parts)  # type: ignore[arg-type]
        if all(value is not None for value in published_parts)
        else None
    )
    if printed is not None:
        cell.published, cell.published_text = printed.value, printed.printed
        if recomputed is not None and abs(printed.value - recomputed) > MEAN_ROUNDING_SLACK + 1e-9:
            table.notes.append(
                f"Published mean of {row.reference_model} is inconsistent: printed "
                f"{printed.printed}, but the mean of its printed cells is {recomputed:.2f}; the "
                "difference column compares with the printed mean."
            )
    elif recomputed is not None:
        cell.published, cell.published_text = recomputed, f"{recomputed:.2f}"
    difference = cell.difference
    cell.beyond_tolerance = difference is not None and abs(difference) > table.tolerance + 1e-9
    return cell


def build_paper_table(
    layout: PaperLayout,
    metrics: pl.DataFrame,
    reference: list[PublishedValue],
    mapping: ReferenceMap,
    benchmark_keys: list[str],
    tolerance: float,
    not_run: Mapping[str, list[str]] | None = None,
) -> PaperTable:
    """Fill a layout with our rows and the published rows, in the paper's row order.

    `not_run` lists the config's models and benchmarks left out of the run because their local
    data is missing (the plan's preflight table); the ones this table would show get a note.
    """
    lookup = published_lookup(reference)
    found = match_metric_rows(metrics, layout, mapping)
    published_on = _published_columns(layout, mapping, benchmark_keys)
    stats = _column_stats(found, len(layout.columns))
    labels = [column.label for column in layout.columns]
    if layout.mean is not None:
        labels.append(layout.mean.label)
    table = PaperTable(layout, labels, [], tolerance, sorted(benchmark_keys))

    def published_cell(name: str | None, index: int, column: Column) -> PublishedValue | None:
        if name is None or not published_on[index]:
            return None
        return lookup.get(
            (layout.table, name, column.benchmark, column.subset, column.direction,
             column.metric, column.k)
        )  # fmt: skip

    def make_row(label: str, model_key: str | None, name: str | None) -> Row:
        cells = [
            _fill_cell(
                found.get((model_key, index)) if model_key is not None else None,
                published_cell(name, index, column),
                stats[index],
                tolerance,
            )
            for index, column in enumerate(layout.columns)
        ]
        return Row(label, model_key, name, cells)

    our_models = sorted({model for model, _ in found})
    reference_models = _reference_models(layout, reference)
    name_of = {
        model: next((n for n in mapping.model_names(model) if n in reference_models), None)
        for model in our_models
    }
    any_published = any(published_on)
    for name in reference_models:
        keys = [model for model in our_models if name_of[model] == name]
        for model in keys:
            table.rows.append(make_row(f"{model} ({name})", model, name))
        if not keys and any_published:
            table.rows.append(make_row(f"{name} (published)", None, name))
    for model in our_models:
        if name_of[model] is None:
            table.rows.append(make_row(model, model, None))
    if layout.mean is not None:
        mean_published = all(published_on[labels.index(label)] for label in layout.mean.of)
        for row in table.rows:
            row.cells.append(_mean_cell(table, row, lookup, mean_published))
    table.notes[:0] = list(layout.notes)
    layout_only = sorted(
        key
        for key in benchmark_keys
        if not mapping.benchmark(key).published
        and mapping.benchmark(key).reference in layout.benchmarks
    )
    if layout_only:
        table.notes.append(
            f"No published values for {', '.join(layout_only)}: the reference map sets "
            "'published: false' (a stand-in, such as synthetic data, in the paper's layout)."
        )
    sources = sorted(
        {value.source for value in reference if value.table == layout.table and any_published}
    )
    table.notes.extend(f"Published values: {source}." for source in sources)
    table.notes.extend(_not_run_notes(layout, mapping, not_run or {}))
    table.notes.extend(short_class_notes(found.values()))
    table.notes.extend(not_computable_notes(found.values()))
    table.coverage = table_coverage(table, reference, mapping, not_run or {})
    return table


def short_class_notes(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """A note naming each benchmark whose few-shot cells had classes with fewer than k + 5
    images (metric rows with `n_short_classes` > 0): flagged, as BioCLIP logs them."""
    flagged: dict[str, set[tuple[int, int]]] = {}
    for row in rows:
        count = _value(row, "n_short_classes")
        if count:
            flagged.setdefault(str(row["benchmark"]), set()).add((int(row["k"]), int(count)))
    return [
        f"Flagged: few-shot on {benchmark} had classes with fewer than k + 5 images ("
        + ", ".join(f"k={k}: {count} classes" for k, count in sorted(counts))
        + "); BioCLIP's few_shot.py logs them as not enough for evaluation and keeps them, "
        "as we do."
        for benchmark, counts in sorted(flagged.items())
    ]


def not_computable_notes(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """A note per metric of this table that could not be computed, with the models and why."""
    models: dict[tuple[str, str, str, str], list[str]] = {}
    for row in rows:
        reason = row.get(NOT_COMPUTABLE_COLUMN)
        if reason and _value(row, "value") is None:
            key = (str(row["benchmark"]), str(row["metric"]), str(row["k"]), str(reason))
            models.setdefault(key, []).append(str(row["model"]))
    return [
        f"Not computable: {metric}@{k} on {benchmark} ({', '.join(sorted(names))}): {reason}."
        for (benchmark, metric, k, reason), names in sorted(models.items())
    ]


def _not_run_notes(
    layout: PaperLayout, mapping: ReferenceMap, not_run: Mapping[str, list[str]]
) -> list[str]:
    """Notes naming what was not run for missing local data: benchmarks of this layout, models."""
    benchmarks = sorted(
        key
        for key in not_run.get("benchmarks", [])
        if mapping.benchmark(key).reference in layout.benchmarks
    )
    notes = []
    for kind, keys in (("benchmark", benchmarks), ("model", sorted(not_run.get("models", [])))):
        if keys:
            notes.append(
                f"Not run ({kind} data missing, see `vlbench preflight`): {', '.join(keys)}."
            )
    return notes
