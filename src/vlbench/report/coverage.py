"""How much of a published table our run filled, and why the rest is empty: one line per table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from vlbench.report.paper_table_model import Coverage, PaperTable
from vlbench.report.reference import BenchmarkRef, PublishedValue, ReferenceMap

if TYPE_CHECKING:
    from vlbench.report.paper_layouts import Column, PaperLayout


def _stands_for(ref: BenchmarkRef, column: Column) -> bool:
    """Whether a benchmark key mapped to `ref` feeds `column`."""
    if ref.reference != column.benchmark:
        return False
    subsets = {subset.casefold() for subset in (column.subset, *column.parts)}
    return ref.subset is None or ref.subset.casefold() in subsets


def _published_grid(
    layout: PaperLayout, reference: Iterable[PublishedValue]
) -> dict[tuple[str, int], None]:
    """(reference model, column number) of every published cell of the table; the mean column
    is number len(columns)."""
    index = {
        (c.benchmark, c.subset.casefold(), c.direction, c.metric, c.k): i
        for i, c in enumerate(layout.columns)
    }
    if layout.mean is not None:
        m = layout.mean
        index[(m.benchmark, m.subset.casefold(), m.direction, m.metric, m.k)] = len(layout.columns)
    grid: dict[tuple[str, int], None] = {}
    for value in reference:
        if value.table != layout.table:
            continue
        key = (value.benchmark, value.subset.casefold(), value.direction, value.metric, value.k)
        if key in index:
            grid[(value.model, index[key])] = None
    return grid


def table_coverage(
    table: PaperTable,
    reference: Iterable[PublishedValue],
    mapping: ReferenceMap,
    not_run: Mapping[str, list[str]],
) -> Coverage:
    """Count the table's published cells that our run filled and say why each other one is not.

    Reasons, in order: the model cannot be reproduced (the map's `not_reproducible`), our
    metric could not be computed on the data (a few-shot k with a class smaller than k), the plan
    left its model or benchmark out for missing data (`not_run`), no configured model or
    benchmark stands for it, or (a fault) it stayed empty although both were run.
    """
    layout = table.layout
    coverage = Coverage(layout.table, layout.title)
    n_columns = len(layout.columns)
    rows_of: dict[str, list] = {}
    for row in table.rows:
        if row.model_key is not None:
            rows_of.setdefault(row.reference_model or "", []).append(row)
            coverage.our_cells += len(row.cells)
            coverage.our_filled += sum(cell.ours is not None for cell in row.cells)
            coverage.our_not_computable += sum(
                cell.ours is None and bool(cell.not_computable) for cell in row.cells
            )
    skipped_models = set(not_run.get("models", []))
    skipped_benchmarks = {key: mapping.benchmark(key) for key in not_run.get("benchmarks", [])}
    run_benchmarks = [mapping.benchmark(key) for key in table.benchmark_keys]

    def columns_of(number: int) -> list[Column]:
        if number < n_columns:
            return [layout.columns[number]]
        assert layout.mean is not None
        return [layout.columns[table.labels.index(label)] for label in layout.mean.of]

    keys = [*table.benchmark_keys, *skipped_benchmarks]
    coverage.stand_in = not any(
        mapping.benchmark(key).published and mapping.benchmark(key).reference in layout.benchmarks
        for key in keys
    )
    grid = {} if coverage.stand_in else _published_grid(layout, reference)
    for name, number in grid:
        coverage.published += 1
        ours = [row for row in rows_of.get(name, []) if row.model_key not in skipped_models]
        if any(row.cells[number].ours is not None for row in ours):
            coverage.ours += 1
            continue
        columns = columns_of(number)
        left_out = sorted(
            {key for key in skipped_models if name in mapping.model_names(key)}
            | {
                key
                for key, ref in skipped_benchmarks.items()
                if any(_stands_for(ref, column) for column in columns)
            }
        )
        computable = [row.cells[number].not_computable for row in ours]
        if name in mapping.not_reproducible:
            category, detail = "not reproducible", f"{name}: {mapping.not_reproducible[name]}"
        elif any(computable):
            category, detail = "not computable", f"{name}: {next(r for r in computable if r)}"
        elif left_out:
            category, detail = "not run, data missing", ", ".join(left_out)
        elif not ours:
            category, detail = "not configured", f"model {name}"
        elif not all(any(_stands_for(ref, c) for ref in run_benchmarks) for c in columns):
            labels = ", ".join(column.label for column in columns)
            category, detail = "not configured", f"benchmark of {labels}"
        else:
            category, detail = "empty although run", f"{name}"
        coverage.reasons.setdefault(category, Counter())[detail] += 1
    return coverage
