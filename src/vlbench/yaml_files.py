"""Read a YAML file whose top level must be a mapping, with one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from vlbench.errors import VlbenchError


def read_yaml_mapping(path: str | Path, what: str) -> dict[str, Any]:
    """The mapping in `path`; `what` names the file in errors ("config file", "reference map")."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
    except FileNotFoundError as exc:
        raise VlbenchError(f"{what} not found: {path}") from exc
    except yaml.YAMLError as exc:
        raise VlbenchError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from exc
    if not isinstance(data, dict):
        raise VlbenchError(f"{path}: the top level of a {what} must be a mapping")
    return data
