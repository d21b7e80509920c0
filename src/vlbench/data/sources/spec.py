"""Small helpers the prepare rule uses to read a benchmark entry of the config."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vlbench.config import source_kind
from vlbench.data.sources import FORMATS, format_name, format_policy
from vlbench.paths import synthetic_source

SETTING_KEYS = ("text_type", "templates", "prompt_prefix", "image_policy", "decode")


def local_root(benchmark: str, source: Mapping[str, Any]) -> str:
    """The folder a non-hub source is read from ("" for hub sources)."""
    kind = source_kind(source)
    if kind == "synthetic":
        return synthetic_source(benchmark)
    return str(source["path"]) if kind == "path" else ""


def protocol_settings(spec: Mapping[str, Any], where: str = "benchmark") -> dict[str, Any]:
    """The benchmark options that shape how a source becomes queries and galleries, with the
    resolved decode policy (the format's default under the config's `decode` keys)."""
    settings = {key: spec[key] for key in SETTING_KEYS if key in spec}
    name = format_name(spec["protocol"], spec["source"])
    if name in FORMATS:  # an unknown or missing format fails in the prepare job
        settings["decode"] = format_policy(name, spec.get("decode"), where).as_dict()
    return settings


def named_source_paths(source: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, path) of every annotation file, image folder and archive a local source names,
    resolved against its folder (absolute values stay as they are)."""
    named = []
    for field in ("annotations", "images", "archive"):
        values = source.get(field)
        for value in [values] if isinstance(values, str) else list(values or []):
            named.append((field, os.path.normpath(os.path.join(source["path"], value))))
    return named


def missing_source_files(config: Mapping[str, Any]) -> list[str]:
    """One line per user-supplied annotation file or image folder that does not exist."""
    lines = []
    for key, spec in config["benchmarks"].items():
        source = spec["source"]
        if source_kind(source) != "path" or not Path(source["path"]).is_dir():
            continue
        for field, path in named_source_paths(source):
            if not Path(path).exists():
                lines.append(f"benchmarks.{key}.source.{field}: not found: {path}")
    return lines
