"""The config a run plans with: its config files, then `--config`, validated with defaults.

Each file is read with line numbers for YAML errors and keys given twice, its relative paths
resolved against its own folder (vlbench.planning.config_paths); the files merge in order, then the
command line's `--config` values (typed by the schema, vlbench.planning.config_overrides) merge over
them. A schema error names who wrote the offending value: the last config file that sets it,
or `--config`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from vlbench.config import SCHEMA_PATH, load_schema, validate_config
from vlbench.planning.config_overrides import SOURCE, merge, typed_overrides, written_by
from vlbench.planning.config_paths import resolve_written_paths
from vlbench.yaml_files import read_yaml_mapping


def _sets(config: Mapping[str, Any], path: Iterable[str | int]) -> bool:
    node: Any = config
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def load_run_config(
    configfiles: Sequence[str | Path],
    overrides: Mapping[str, Any] | None = None,
    cwd: str | Path | None = None,
    schema_path: str | Path = SCHEMA_PATH,
) -> dict[str, Any]:
    """The validated config of a run in `cwd` (default: the current directory)."""
    cwd = Path(os.path.abspath(cwd or os.getcwd()))
    files = [Path(os.path.abspath(cwd / path)) for path in configfiles]
    written = [
        (path, resolve_written_paths(read_yaml_mapping(path, "config file"), path.parent, cwd))
        for path in files
    ]
    merged: dict[str, Any] = {}
    for _, raw in written:
        merge(merged, raw)
    typed = typed_overrides(overrides or {}, load_schema(schema_path))
    merge(merged, typed)

    def blame(path: tuple[str | int, ...], keys: list[str]) -> str:
        if written_by(typed, path, keys):
            return SOURCE
        setting = [str(file) for file, raw in written if _sets(raw, [*path, *keys[:1]])]
        if setting:
            return setting[-1]
        if _sets(typed, path):
            return SOURCE
        return ", ".join(str(file) for file in files) or SOURCE

    return validate_config(merged, blame, schema_path)
