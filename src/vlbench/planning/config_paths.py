"""The one rule for relative paths in a config: a path is relative to where it is written.

A path written in a config file is relative to that file's folder (`data_root` included), so a
shipped config names the shipped files beside it and works from any working directory
(`--directory`); a path given on the command line (`--config`) or left at its schema default
(`data_root: data`) is relative to the working directory, like `results/`. Absolute paths and
paths under `{data_root}` (relative to `data_root` itself) stay as they are.

A resolved path is written relative to the working directory when it lies inside it, else
absolute: the jobs' parameters (and so the reruns) stay the same for a config that sits in its
working directory, and a copy of such a directory is a complete run of its own.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vlbench.embedding.models.hub import HF_HUB_PREFIX, LOCAL_DIR_PREFIX, looks_like_path

PLACEHOLDER = "{data_root}"


def resolve_path(value: str, folder: Path, cwd: Path) -> str:
    """A path written in a file in `folder`, as the workflow (running in `cwd`) reads it."""
    if not value or PLACEHOLDER in value or os.path.isabs(value) or folder == cwd:
        return value
    target = os.path.normpath(folder / value)
    inside = os.path.commonpath([cwd, target]) == str(cwd)
    return os.path.relpath(target, cwd) if inside else target


def _prefixed(value: str, prefix: str, folder: Path, cwd: Path) -> str:
    return prefix + resolve_path(value.removeprefix(prefix), folder, cwd)


def _model_paths(spec: dict[str, Any], folder: Path, cwd: Path) -> None:
    for field in ("name", "pretrained", "text_model"):
        value = spec.get(field)
        if isinstance(value, str) and value.startswith(LOCAL_DIR_PREFIX):
            spec[field] = _prefixed(value, LOCAL_DIR_PREFIX, folder, cwd)
    pretrained = spec.get("pretrained")
    if isinstance(pretrained, str) and looks_like_path(pretrained):
        spec["pretrained"] = resolve_path(pretrained, folder, cwd)
    if isinstance(spec.get("model_config"), str):
        spec["model_config"] = resolve_path(spec["model_config"], folder, cwd)
    text_model = spec.get("text_model")
    plain = isinstance(text_model, str) and not text_model.startswith(
        (HF_HUB_PREFIX, LOCAL_DIR_PREFIX, PLACEHOLDER)
    )
    if plain and (folder / text_model).is_dir():  # a folder beside the config, not a hub id
        spec["text_model"] = resolve_path(text_model, folder, cwd)


def resolve_written_paths(raw: Mapping[str, Any], folder: Path, cwd: Path) -> dict[str, Any]:
    """A copy of one config file's mapping (not validated yet) with each relative path it
    writes resolved against `folder`, the file's folder (see the module docstring)."""
    config = copy.deepcopy(dict(raw))
    folder, cwd = Path(os.path.abspath(folder)), Path(os.path.abspath(cwd))
    if isinstance(config.get("data_root"), str) and config["data_root"]:
        config["data_root"] = resolve_path(config["data_root"], folder, cwd)
    for spec in _entries(config, "models"):
        _model_paths(spec, folder, cwd)
    for spec in _entries(config, "benchmarks"):
        source = spec.get("source")
        if isinstance(source, dict) and isinstance(source.get("path"), str):
            source["path"] = resolve_path(source["path"], folder, cwd)
    tables = config.get("tables")
    for field in ("reference", "map"):
        if isinstance(tables, dict) and isinstance(tables.get(field), str):
            tables[field] = resolve_path(tables[field], folder, cwd)
    return config


def _entries(config: dict[str, Any], section: str) -> list[dict[str, Any]]:
    entries = config.get(section)
    if not isinstance(entries, dict):
        return []
    return [spec for spec in entries.values() if isinstance(spec, dict)]
