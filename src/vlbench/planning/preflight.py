"""One table of every model and benchmark of a config and whether it can run.

States: pinned / locked / will pin on first use (hub downloads), local file present, generated
(synthetic data, random weights), or missing (a local folder or file that is not there, with
the layout it needs, and for a benchmark whose config names an `importer`, the `vlbench import`
command that makes the folder from the publisher's files). With `missing_data: skip` (the
default) planning leaves the missing ones out of the run, the table says "not run" and
`results/tables/not_run.csv` lists them; with `missing_data: fail`, or when nothing would be
left to run, planning stops naming every missing path. No job is ever planned that can only fail
for missing data. `vlbench preflight CONFIG` prints the same table without planning.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vlbench.config import source_kind
from vlbench.data.importers import IMPORTERS
from vlbench.data.sources import FORMATS, format_name
from vlbench.embedding.models.dispatch import local_paths
from vlbench.errors import VlbenchError
from vlbench.planning.checks import missing_local_paths
from vlbench.planning.lockfile import Pin
from vlbench.planning.pinning import FIRST_USE, LOCKED, PINNED, commit_of, hub_uses, state

MISSING, NOT_RUN = "missing", "not run: missing"
PRESENT, GENERATED, BUILT_IN = "local files present", "generated", "download pinned by its URL"
SKIP = "skip"
# The layout a local benchmark folder needs, by source format (config/README.md has the detail).
SEVERITY = {PINNED: 0, LOCKED: 1, FIRST_USE: 2}


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    kind: str  # model or benchmark
    key: str
    state: str
    detail: str

    @property
    def missing(self) -> bool:
        return self.state in (MISSING, NOT_RUN)


def _hub_state(config: Mapping[str, Any], pins: Mapping[str, Pin]) -> tuple[str, str] | None:
    """The least settled pin state of an entry's hub downloads, and what they are."""
    uses = hub_uses(config)
    if not uses:
        return None
    worst = max((state(use, pins) for use in uses), key=SEVERITY.__getitem__)
    detail = ", ".join(
        f"{use.repo_type} {use.repo} @ {(commit_of(use, pins) or '-')[:12]}" for use in uses
    )
    return worst, detail


def _layout(spec: Mapping[str, Any]) -> str:
    name = format_name(spec["protocol"], spec["source"]) or ""
    return FORMATS[name].layout if name in FORMATS else name


def _import_hint(spec: Mapping[str, Any]) -> str:
    """How to make a missing user-supplied folder, for a benchmark that names its importer."""
    importer = IMPORTERS.get(spec.get("importer", ""))
    if importer is None:
        return ""
    return f"; make it with: {importer.command(str(spec['source']['path']))}"


def model_row(key: str, spec: Mapping[str, Any], pins: Mapping[str, Pin], missing: str) -> Row:
    """The table row of one model."""
    alone = {"models": {key: spec}, "benchmarks": {}}
    lines = missing_local_paths(alone)
    if lines:
        return Row("model", key, missing, "; ".join(lines))
    if "random_init_seed" in spec:
        return Row("model", key, GENERATED, "seeded random weights (demos and tests)")
    hub = _hub_state(alone, pins)
    if hub is not None:
        return Row("model", key, *hub)
    paths = [value for _, value, _ in local_paths(spec)]
    if paths:
        return Row("model", key, PRESENT, ", ".join(paths))
    return Row("model", key, BUILT_IN, f"{spec.get('name')} {spec.get('pretrained', '')}".strip())


def benchmark_row(key: str, spec: Mapping[str, Any], pins: Mapping[str, Pin], missing: str) -> Row:
    """The table row of one benchmark."""
    source = spec["source"]
    kind = source_kind(source)
    if kind == "synthetic":
        synthetic = source["synthetic"]
        detail = f"synthetic: {synthetic.get('pairs')} pairs, seed {synthetic.get('seed', 0)}"
        return Row("benchmark", key, GENERATED, detail)
    alone = {"models": {}, "benchmarks": {key: spec}}
    if kind == "hub":
        hub = _hub_state(alone, pins)
        assert hub is not None
        return Row("benchmark", key, *hub)
    lines = missing_local_paths(alone)
    if lines:
        detail = f"{'; '.join(lines)} (needs {_layout(spec)}){_import_hint(spec)}"
        return Row("benchmark", key, missing, detail)
    return Row("benchmark", key, PRESENT, str(source["path"]))


def preflight_rows(config: Mapping[str, Any], pins: Mapping[str, Pin]) -> list[Row]:
    """Every model, then every benchmark, of a validated config (data_root expanded)."""
    missing = NOT_RUN if config.get("missing_data", SKIP) == SKIP else MISSING
    rows = [model_row(key, spec, pins, missing) for key, spec in config["models"].items()]
    rows += [benchmark_row(k, s, pins, missing) for k, s in config["benchmarks"].items()]
    return rows


def render(rows: list[Row], title: str) -> str:
    """The table as aligned plain text, one row per line, under a title line."""
    header = ("", "key", "state", "detail")
    cells = [header] + [(row.kind, row.key, row.state, row.detail) for row in rows]
    widths = [max(len(cell[i]) for cell in cells) for i in range(3)]
    lines = [title]
    for cell in cells:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=False)))
        lines[-1] += "  " + cell[3]
    return "\n".join(line.rstrip() for line in lines)


def refuse_missing(config: Mapping[str, Any], rows: list[Row]) -> None:
    """Stop planning when missing data cannot be left out: `missing_data: fail`, or every model
    (or every benchmark) missing, so that nothing would be left to run. The error names every
    missing path."""
    missing = [row for row in rows if row.missing]
    if not missing:
        return
    listed = "; ".join(f"{row.kind} {row.key}: {row.detail}" for row in missing)
    if config.get("missing_data", SKIP) != SKIP:
        raise VlbenchError(
            f"missing_data: fail, and {len(missing)} entries miss their local data: {listed}"
        )
    for kind in ("model", "benchmark"):
        entries = [row for row in rows if row.kind == kind]
        if entries and all(row.missing for row in entries):
            raise VlbenchError(
                f"nothing to run: every {kind} misses its local data: {listed} (put the data in "
                "place, or set data_root; `vlbench preflight CONFIG` shows what is missing)"
            )


def drop_missing(config: Mapping[str, Any], rows: list[Row]) -> tuple[dict[str, Any], list[Row]]:
    """The config without the entries whose local data is missing (`missing_data: skip`), and
    the rows. Planning calls `refuse_missing` first."""
    kept = copy.deepcopy(dict(config))
    if config.get("missing_data", SKIP) != SKIP:
        return kept, rows
    for row in rows:
        if row.missing:
            kept[f"{row.kind}s"].pop(row.key, None)
    return kept, rows


def not_run(rows: list[Row]) -> dict[str, list[str]]:
    """The keys marked "not run", by section (models, benchmarks), for the paper tables."""
    return {
        section: sorted(row.key for row in rows if row.state == NOT_RUN and row.kind == kind)
        for section, kind in (("models", "model"), ("benchmarks", "benchmark"))
    }


NOT_RUN_COLUMNS = ("kind", "key", "reason", "detail")
MISSING_DATA = "missing data"


def not_run_rows(rows: list[Row]) -> list[dict[str, str]]:
    """What the plan left out, one mapping per entry (the columns of not_run.csv)."""
    return [
        {"kind": row.kind, "key": row.key, "reason": MISSING_DATA, "detail": row.detail}
        for row in rows
        if row.state == NOT_RUN
    ]
