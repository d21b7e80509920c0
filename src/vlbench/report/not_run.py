"""What a run left out, and why: `results/tables/not_run.csv` and the lines printed at its end.

The plan leaves out models and benchmarks whose local data is missing (`missing_data: skip`,
vlbench.planning.preflight); the paper tables note them, this file lists them with the reason
and the missing path, so the omission is in the results and not only at the top of a log. The
tables job adds the metrics that could not be computed (kind `metric`, reason `not computable`:
a few-shot k with a class smaller than k), with the classes, their counts and the models.
Images a benchmark left out under `image_policy: skip` are named at the run's end as well.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from vlbench.atomic import write_text
from vlbench.paths import PREPARED_DIR

COLUMNS = ("kind", "key", "reason", "detail")
NOT_COMPUTABLE = "not computable"


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


def not_computable_rows(records: Iterable[Mapping[str, str]]) -> list[dict[str, str]]:
    """not_run.csv rows of the metrics that could not be computed
    (`vlbench.report.tables.not_computable` records)."""
    return [
        {
            "kind": "metric",
            "key": f"{record['benchmark']}/{record['subset']} {record['cell']}",
            "reason": NOT_COMPUTABLE,
            "detail": f"{record['reason']}; models: {record['models']}",
        }
        for record in records
    ]


def read_not_run(path: str | Path) -> list[dict[str, str]]:
    """The rows of a written not_run.csv (none if it is absent)."""
    if not Path(path).is_file():
        return []
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def not_run_summary(rows: Iterable[Mapping[str, str]], path: str | Path) -> str | None:
    """One line naming what the plan left out and where it is listed (None when nothing was)."""
    rows = [row for row in rows if row["reason"] != NOT_COMPUTABLE]
    if not rows:
        return None
    listed = ", ".join(f"{row['kind']} {row['key']} ({row['reason']})" for row in rows)
    return f"vlbench: not run: {listed}; see {path}"


def not_computable_summary(rows: Iterable[Mapping[str, str]], path: str | Path) -> list[str]:
    """One line per metric that could not be computed, naming why (none when every one was)."""
    return [
        f"vlbench: not computable: {row['key']}: {row['detail']} (listed in {path})"
        for row in rows
        if row["reason"] == NOT_COMPUTABLE
    ]


def skipped_images_summary(benchmarks: Iterable[str], shown: int = 3) -> list[str]:
    """One line per benchmark whose prepare job left images out (`image_policy: skip`): how
    many of how many, the first few ids with their reasons, and the file listing them all."""
    lines = []
    for benchmark in benchmarks:
        meta_path = Path(PREPARED_DIR.format(benchmark=benchmark)) / "benchmark.json"
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        skipped = meta.get("skipped_images") or []
        if not skipped:
            continue
        examples = "; ".join(f"{item['image_id']}: {item['reason']}" for item in skipped[:shown])
        more = f"; and {len(skipped) - shown} more" if len(skipped) > shown else ""
        lines.append(
            f"vlbench: {benchmark}: {len(skipped)} of {meta.get('n_source_images', '?')} images "
            f"left out (image_policy: skip): {examples}{more} (listed in {meta_path}, "
            "skipped_images)"
        )
    return lines
