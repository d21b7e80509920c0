"""`vlbench preflight CONFIG`: the state of every model and benchmark, without planning."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from vlbench.errors import VlbenchError
from vlbench.planning.checks import check_model_keys
from vlbench.planning.config_overrides import parse_assignments
from vlbench.planning.data_root import expand_data_root
from vlbench.planning.lockfile import lock_path, read_lock
from vlbench.planning.preflight import drop_missing, preflight_rows, render
from vlbench.planning.run_config import load_run_config


def preflight(
    config_path: str | Path,
    data_root: str | None = None,
    out: TextIO = sys.stdout,
    overrides: list[str] | None = None,
) -> int:
    """Print the table; 1 when any model or benchmark has missing local data, else 0.

    `overrides` are `--config` assignments (`key=value`, dotted keys for nested settings).
    """
    config_path = Path(config_path)
    assignments = parse_assignments(overrides or [])
    if data_root is not None:
        assignments["data_root"] = data_root
    validated = load_run_config([config_path], assignments)
    check_model_keys(validated)
    config = expand_data_root(validated)
    lock = lock_path(config_path)
    _, rows = drop_missing(config, preflight_rows(config, read_lock(lock)))
    print(render(rows, f"vlbench preflight of {config_path} (lock: {lock}):"), file=out)
    return 1 if any(row.missing for row in rows) else 0


def run_preflight(config: str, data_root: str | None, overrides: list[str] | None = None) -> int:
    """CLI entry: one-line errors for a bad config or lock file."""
    try:
        return preflight(config, data_root, overrides=overrides)
    except VlbenchError as error:
        print(f"vlbench error: {error}", file=sys.stderr)
        return 2
