"""Find the parquet files of a split in a Hugging Face dataset repository layout.

Downloads live in vlbench.data.sources.download (pinned, retried, verified).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from vlbench.errors import VlbenchError


def read_card_configs(repo_dir: Path) -> list[dict[str, Any]]:
    """The `configs:` list of the dataset card's YAML front matter ([] when absent)."""
    readme = repo_dir / "README.md"
    if not readme.is_file():
        return []
    text = readme.read_text(encoding="utf-8")
    if not text.startswith("---"):
        return []
    front, _, _ = text[3:].partition("\n---")
    try:
        meta = yaml.safe_load(front) or {}
    except yaml.YAMLError as exc:
        raise VlbenchError(f"{readme}: the YAML front matter does not parse ({exc})") from exc
    configs = meta.get("configs") or []
    return configs if isinstance(configs, list) else []


def split_patterns(repo_dir: Path, split: str, config_name: str = "default") -> list[str]:
    """Glob patterns of the split's data files, as the card's configs declare them."""
    for entry in read_card_configs(repo_dir):
        if entry.get("config_name", "default") != config_name:
            continue
        data_files = entry.get("data_files") or []
        if isinstance(data_files, str | dict):
            data_files = [data_files]
        patterns: list[str] = []
        for item in data_files:
            if isinstance(item, str):
                patterns.append(item)
            elif item.get("split") == split:
                paths = item.get("path")
                patterns.extend([paths] if isinstance(paths, str) else list(paths or []))
        if patterns:
            return patterns
    return [f"data/{split}-*", f"{config_name}/{split}-*"]


def split_files(repo_dir: str | Path, split: str, config_name: str = "default") -> list[Path]:
    """The sorted parquet files of `split` in a local directory laid out like the hub repo."""
    repo_dir = Path(repo_dir)
    if not repo_dir.is_dir():
        raise VlbenchError(f"benchmark source directory does not exist: {repo_dir}")
    patterns = split_patterns(repo_dir, split, config_name)
    files = sorted(
        {path for pattern in patterns for path in repo_dir.glob(pattern) if path.is_file()}
    )
    files = [path for path in files if path.suffix == ".parquet"]
    if not files:
        raise VlbenchError(
            f"{repo_dir}: no parquet files for config '{config_name}' split '{split}' "
            f"(looked for {', '.join(patterns)})"
        )
    return files
