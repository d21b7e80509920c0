"""The filled paper table as data: its cells, rows and coverage (built by
vlbench.report.paper_tables and vlbench.report.coverage, written by
vlbench.report.table_writers)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from vlbench.report.paper_layouts import PaperLayout


@dataclass
class Coverage:
    """Published cells of one table, ours among them, and the reasons the others are empty."""

    table: str
    title: str
    published: int = 0
    ours: int = 0
    # why published cells stayed empty: category -> detail (a model, a benchmark) -> cells
    reasons: dict[str, Counter] = field(default_factory=dict)
    # Published values are not compared (every benchmark of the table is a stand-in).
    stand_in: bool = False
    # Cells of our own rows (every configured model that reaches this table), and the filled ones.
    our_cells: int = 0
    our_filled: int = 0
    # Cells of our rows whose metric could not be computed (named in the table's notes).
    our_not_computable: int = 0

    @property
    def complete(self) -> bool:
        """Every cell of every row of ours is filled, or says why it cannot be computed."""
        return self.our_filled + self.our_not_computable == self.our_cells

    def summary(self) -> str:
        """'44/66 published cells ours; 22 not reproducible (...); cells of our rows filled:
        77/77.'"""
        if self.stand_in:
            parts = ["published values not compared (the benchmarks are stand-ins)"]
        else:
            parts = [f"{self.ours}/{self.published} published cells ours"]
        for category, details in sorted(self.reasons.items()):
            listed = "; ".join(detail for detail in details)
            parts.append(f"{sum(details.values())} {category} ({listed})")
        filled = f"cells of our rows filled: {self.our_filled}/{self.our_cells}"
        if self.our_not_computable:
            filled += f" ({self.our_not_computable} not computable, named in the notes)"
        parts.append(filled)
        return "; ".join(parts) + "."

    def line(self) -> str:
        """The summary after the table's title."""
        return f"{self.title}: {self.summary()}"

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready record (results/tables/paper/<table>.coverage.json)."""
        return {
            "table": self.table,
            "title": self.title,
            "published_cells": self.published,
            "ours": self.ours,
            "reasons": {key: dict(value) for key, value in sorted(self.reasons.items())},
            "stand_in": self.stand_in,
            "our_cells": self.our_cells,
            "our_filled": self.our_filled,
            "our_not_computable": self.our_not_computable,
            "line": self.line(),
        }


@dataclass
class Cell:
    """Ours, the published value and their difference for one row and column."""

    ours: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    published: float | None = None
    published_text: str | None = None
    chance: float | None = None
    n_queries: int | None = None
    beyond_tolerance: bool = False
    ours_at_chance: bool | None = None
    published_at_chance: bool | None = None
    # Why our value could not be computed (empty: it was, or the metric was not run).
    not_computable: str = ""
    # Ours is the best of two or more of our models in its metric column, or tied with it
    # (vlbench.metrics.standings); never for a column that averages subsets.
    tied_with_best: bool = False

    @property
    def difference(self) -> float | None:
        """ours - published, in percentage points, when both exist."""
        if self.ours is None or self.published is None:
            return None
        return self.ours - self.published


@dataclass
class Row:
    """One model's row: our run of a model key, a published-only model, or both."""

    label: str
    model_key: str | None
    reference_model: str | None
    cells: list[Cell]

    @property
    def ours_at_chance(self) -> bool | None:
        """True when no cell of ours is above chance; None when no cell has a chance level."""
        return _all_flags(cell.ours_at_chance for cell in self.cells)

    @property
    def published_at_chance(self) -> bool | None:
        """True when no published cell is above chance (judged with our query count)."""
        return _all_flags(cell.published_at_chance for cell in self.cells)


@dataclass
class PaperTable:
    """A paper table filled in: columns (plus the mean column), rows and notes."""

    layout: PaperLayout
    labels: list[str]
    rows: list[Row]
    tolerance: float
    benchmark_keys: list[str]
    notes: list[str] = field(default_factory=list)
    coverage: Coverage | None = None


def _all_flags(flags: Iterable[bool | None]) -> bool | None:
    known = [flag for flag in flags if flag is not None]
    return all(known) if known else None
