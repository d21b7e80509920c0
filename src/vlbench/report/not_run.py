"""What a run left out, and why: `results/tables/not_run.csv` and the line printed at its end.

The plan leaves out models and benchmarks whose local data is missing (`missing_data: skip`,
vlbench.workflow.preflight); the paper tables note them, this file lists them with the reason
and the missing path, so the omission is in the results and not only at the top of a log.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from pathlib import Path

from vlbench.atomic import write_text

COLUMNS = ("kind", "key", "reason", "detail")


def not_run_csv(rows: Iterable[Mapping[str, str]]) -> str:
    """The CSV text: one row per entry left out (a header only when nothing was)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({column: row[column] for column in COLUMNS} for row in rows)
    return buffer.getvalue()


def write_not_run(rows: Iterable[Mapping[str, str]], path: str | Path) -> None:
    """Write not_run.csv atomically."""
    write_text(path, not_run_csv(rows))


def not_run_summary(rows: Iterable[Mapping[str, str]], path: str | Path) -> str | None:
    """One line naming what was left out and where it is listed (None when nothing was)."""
    rows = list(rows)
    if not rows:
        return None
    listed = ", ".join(f"{row['kind']} {row['key']} ({row['reason']})" for row in rows)
    return f"vlbench: not run: {listed}; see {path}"
