"""The parse step in one call: config files and `--config` -> the run's `Plan`.

What `workflow/rules/common.smk` decides once per Snakemake start (on the submitting host and
again inside every cluster job): the validated config with its data root expanded and its pins
read from the lock file (never resolved here: a run that executes jobs resolves the missing ones
on first use, `Plan.first_use`), the preflight table and what it leaves out, the reference
files, and the run's model, benchmark and paper-table lists and file lists. No network access
and no file writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlbench.planning.checks import check_model_keys
from vlbench.planning.data_root import expand_data_root
from vlbench.planning.lockfile import lock_path, read_lock
from vlbench.planning.pinning import FirstUsePins, plan_pins
from vlbench.planning.preflight import (
    drop_missing,
    not_run,
    not_run_rows,
    preflight_rows,
    refuse_missing,
    render,
)
from vlbench.planning.run_config import load_run_config
from vlbench.planning.targets import (
    all_targets,
    fewshot_metric_files,
    metric_files,
    outcome_files,
    probe_metric_files,
    table_files,
)
from vlbench.report.paper_layouts import layouts_for
from vlbench.report.reference import read_map


@dataclass(frozen=True)
class Plan:
    """Everything the rule files read from the parse step."""

    config: dict[str, Any]
    first_use: FirstUsePins
    # The preflight table as printed, and the entries it left out (key -> reason; rows).
    preflight_report: str
    not_run: dict[str, list[str]]
    not_run_rows: list[dict[str, str]]
    reference_csv: str
    reference_map: str
    models: list[str]
    benchmarks: list[str]
    paper_tables: list[str]
    all_targets: list[str]
    table_files: list[str]
    # Every metric CSV the tables read (few-shot and probe ones included; they have no
    # outcomes) and the per-query outcomes behind the ranked ones.
    metric_files: list[str]
    outcome_files: list[str]


def plan(
    config_files: Sequence[str | Path],
    overrides: Mapping[str, Any],
    schema_path: str | Path,
    reference_dir: str | Path,
) -> Plan:
    """Plan a run of the config files (the last one names the lock file) with `--config`
    overrides; a VlbenchError says in one line why the run cannot be planned."""
    validated = load_run_config(list(config_files), dict(overrides), schema_path=schema_path)
    check_model_keys(validated)
    validated = expand_data_root(validated)
    config_path = Path(config_files[-1])
    lock = lock_path(config_path)
    as_written = validated
    validated, _, _ = plan_pins(as_written, lock, config_path.name, resolve=False)
    preflight = preflight_rows(as_written, read_lock(lock))
    report = render(preflight, f"vlbench preflight of {config_path} (lock: {lock}):")
    refuse_missing(as_written, preflight)
    validated, preflight = drop_missing(validated, preflight)
    reference_csv = validated["tables"]["reference"] or str(
        Path(reference_dir) / "published_results.csv"
    )
    reference_map = validated["tables"]["map"] or str(Path(reference_dir) / "map.yaml")
    benchmarks = sorted(validated["benchmarks"])
    paper_tables = [layout.table for layout in layouts_for(benchmarks, read_map(reference_map))]
    return Plan(
        config=validated,
        first_use=FirstUsePins(as_written, lock, config_path.name),
        preflight_report=report,
        not_run=not_run(preflight),
        not_run_rows=not_run_rows(preflight),
        reference_csv=reference_csv,
        reference_map=reference_map,
        models=sorted(validated["models"]),
        benchmarks=benchmarks,
        paper_tables=paper_tables,
        all_targets=all_targets(validated, paper_tables),
        table_files=table_files(validated, paper_tables),
        metric_files=(
            metric_files(validated)
            + fewshot_metric_files(validated)
            + probe_metric_files(validated)
        ),
        outcome_files=outcome_files(validated),
    )
