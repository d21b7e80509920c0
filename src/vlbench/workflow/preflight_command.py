"""`vlbench preflight CONFIG`: the state of every model and benchmark, without planning."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from vlbench.config import validate_config
from vlbench.errors import VlbenchError
from vlbench.workflow.data_root import expand_data_root
from vlbench.workflow.lockfile import lock_path, read_lock
from vlbench.workflow.preflight import drop_missing, preflight_rows, render
from vlbench.yaml_files import read_yaml_mapping


def preflight(
    config_path: str | Path, data_root: str | None = None, out: TextIO = sys.stdout
) -> int:
    """Print the table; 1 when any model or benchmark has missing local data, else 0."""
    config_path = Path(config_path)
    raw = read_yaml_mapping(config_path, "config file")
    if data_root is not None:
        raw["data_root"] = data_root
    config = expand_data_root(validate_config(raw, str(config_path)))
    lock = lock_path(config_path)
    _, rows = drop_missing(config, preflight_rows(config, read_lock(lock)))
    print(render(rows, f"vlbench preflight of {config_path} (lock: {lock}):"), file=out)
    return 1 if any(row.missing for row in rows) else 0


def run_preflight(config: str, data_root: str | None) -> int:
    """CLI entry: one-line errors for a bad config or lock file."""
    try:
        return preflight(config, data_root)
    except VlbenchError as error:
        print(f"vlbench error: {error}", file=sys.stderr)
        return 2
