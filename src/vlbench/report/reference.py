"""Published numbers and the map from a config's model/benchmark keys to their reference rows."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlbench.errors import VlbenchError
from vlbench.yaml_files import read_yaml_mapping

REFERENCE_COLUMNS = [
    "table",
    "benchmark",
    "subset",
    "model",
    "model_spec",
    "direction",
    "metric",
    "k",
    "value",
    "unit",
    "source",
]


@dataclass(frozen=True)
class PublishedValue:
    """One published table cell, with the text it was printed as and where it comes from."""

    table: str
    benchmark: str
    subset: str
    model: str
    direction: str
    metric: str
    k: int | None
    value: float
    printed: str
    source: str


@dataclass(frozen=True)
class BenchmarkRef:
    """What one of our benchmark keys stands for in the published tables."""

    reference: str
    subset: str | None = None
    published: bool = True


@dataclass
class ReferenceMap:
    """Model key -> reference model names; benchmark key -> reference benchmark and subset;
    reference model name -> why no config can reproduce its row."""

    models: dict[str, list[str]] = field(default_factory=dict)
    benchmarks: dict[str, BenchmarkRef] = field(default_factory=dict)
    not_reproducible: dict[str, str] = field(default_factory=dict)

    def model_names(self, model_key: str) -> list[str]:
        """Reference names of a model key; a key spelt like a reference name stands for itself."""
        return self.models.get(model_key, [model_key])

    def benchmark(self, benchmark_key: str) -> BenchmarkRef:
        """The reference benchmark of a key; an unmapped key stands for itself."""
        return self.benchmarks.get(benchmark_key, BenchmarkRef(reference=benchmark_key))


def _parse_k(text: str, where: str) -> int | None:
    if text.strip() == "":
        return None
    try:
        return int(text)
    except ValueError as exc:
        raise VlbenchError(f"{where}: k {text!r} is not an integer") from exc


def _parse_value(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise VlbenchError(f"{where}: value {text!r} is not a number") from exc
    if not math.isfinite(value):
        raise VlbenchError(f"{where}: value {text!r} is not finite")
    return value


def read_reference(path: str | Path) -> list[PublishedValue]:
    """Read the long published-results CSV; every row keeps its source."""
    path = Path(path)
    if not path.is_file():
        raise VlbenchError(f"reference file not found: {path}")
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [name for name in REFERENCE_COLUMNS if name not in (reader.fieldnames or [])]
        if missing:
            raise VlbenchError(f"{path}: missing column(s) {', '.join(missing)}")
        values = []
        for line, row in enumerate(reader, start=2):
            where = f"{path} row {line}"
            if row["unit"] != "percent":
                raise VlbenchError(f"{where}: unit {row['unit']!r} (expected 'percent')")
            values.append(
                PublishedValue(
                    table=row["table"],
                    benchmark=row["benchmark"],
                    subset=row["subset"],
                    model=row["model"],
                    direction=row["direction"],
                    metric=row["metric"],
                    k=_parse_k(row["k"], where),
                    value=_parse_value(row["value"], where),
                    printed=row["value"].strip(),
                    source=row["source"],
                )
            )
    return values


def _name_list(value: Any, where: str) -> list[str]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise VlbenchError(f"{where}: expected a reference model name or a list of them")
    return names


def _benchmark_ref(value: Any, where: str) -> BenchmarkRef:
    if isinstance(value, str):
        return BenchmarkRef(reference=value)
    if not isinstance(value, Mapping) or "reference" not in value:
        raise VlbenchError(f"{where}: expected a mapping with a 'reference' key")
    unknown = sorted(set(value) - {"reference", "subset", "published"})
    if unknown:
        raise VlbenchError(
            f"{where}: unknown key {', '.join(unknown)} (allowed: published, reference, subset)"
        )
    if not isinstance(value.get("published", True), bool):
        raise VlbenchError(f"{where}.published: expected true or false")
    subset = value.get("subset")
    return BenchmarkRef(
        reference=str(value["reference"]),
        subset=None if subset is None else str(subset),
        published=value.get("published", True),
    )


def read_map(path: str | Path) -> ReferenceMap:
    """Read and check a reference map YAML (see config/reference/map.yaml)."""
    path = Path(path)
    raw = read_yaml_mapping(path, "reference map")
    unknown = sorted(set(raw) - {"models", "benchmarks", "not_reproducible"})
    if unknown:
        raise VlbenchError(
            f"{path}: unknown key {', '.join(unknown)} "
            "(allowed: benchmarks, models, not_reproducible)"
        )
    models = {
        str(key): _name_list(value, f"{path}: models.{key}")
        for key, value in (raw.get("models") or {}).items()
    }
    benchmarks = {
        str(key): _benchmark_ref(value, f"{path}: benchmarks.{key}")
        for key, value in (raw.get("benchmarks") or {}).items()
    }
    reasons = raw.get("not_reproducible") or {}
    if not isinstance(reasons, Mapping) or not all(
        isinstance(reason, str) and reason.strip() for reason in reasons.values()
    ):
        raise VlbenchError(f"{path}: not_reproducible: expected reference model name: reason")
    return ReferenceMap(
        models=models,
        benchmarks=benchmarks,
        not_reproducible={str(name): str(reason) for name, reason in reasons.items()},
    )


def published_lookup(
    values: Iterable[PublishedValue],
) -> dict[tuple[str, str, str, str, str, str, int | None], PublishedValue]:
    """Index published cells by (table, model, benchmark, subset, direction, metric, k)."""
    lookup = {}
    for value in values:
        key = (
            value.table,
            value.model,
            value.benchmark,
            value.subset,
            value.direction,
            value.metric,
            value.k,
        )
        if key in lookup:
            raise VlbenchError(f"reference: duplicate published cell {key}")
        lookup[key] = value
    return lookup
