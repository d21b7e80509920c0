"""`{data_root}` in a config's local paths: one folder holds every manual download.

Datasets and checkpoints that cannot be fetched from the hub (licences) are named in the paper
configs as `{data_root}/nabirds`, `{data_root}/checkpoints/...`; the top-level `data_root` key
(default `data`, overridable with `--config data_root=/big/disk`) says where that folder is.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from vlbench.errors import VlbenchError

PLACEHOLDER = "{data_root}"
MODEL_FIELDS = ("name", "pretrained", "model_config", "text_model")
SOURCE_FIELDS = ("path", "annotations", "images", "archive")


def _expand(value: Any, root: str, where: str) -> Any:
    if isinstance(value, list):
        return [_expand(item, root, f"{where}[{i}]") for i, item in enumerate(value)]
    if not isinstance(value, str) or PLACEHOLDER not in value:
        return value
    if not root:
        raise VlbenchError(f"{where} uses {PLACEHOLDER}, but 'data_root' is empty")
    return value.replace(PLACEHOLDER, root.rstrip("/") or "/")


def expand_data_root(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a validated config with `{data_root}` replaced in every local path."""
    root = str(config.get("data_root", "data"))
    expanded = copy.deepcopy(dict(config))
    for key, spec in expanded["models"].items():
        for field in MODEL_FIELDS:
            if field in spec:
                spec[field] = _expand(spec[field], root, f"models.{key}.{field}")
    for key, spec in expanded["benchmarks"].items():
        source = spec["source"]
        for field in SOURCE_FIELDS:
            if field in source:
                source[field] = _expand(source[field], root, f"benchmarks.{key}.source.{field}")
    return expanded
