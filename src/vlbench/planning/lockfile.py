"""The lock file of a config: the commit each unpinned hub repository resolved to on first use.

`config/biocap.yaml` has its lock beside it, `config/biocap.lock` (YAML, committed with the
config like any lock file). One entry per hub repository, keyed `"<repo type> <org/name>"`,
so every benchmark reading one repository shares one commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from vlbench.atomic import write_text
from vlbench.data.sources.hub_access import COMMIT_PATTERN
from vlbench.errors import VlbenchError
from vlbench.yaml_files import DuplicateKeyError, load_yaml

LOCK_SUFFIX = ".lock"
VERSION = 1
HEADER = """\
# vlbench lock file of {config}: the commit each hub repository that the config leaves
# unpinned resolved to on its first use. Commit it with the config; later runs read it and so
# never move. A revision set in the config wins over this file; `vlbench lock --update {config}`
# (or deleting an entry) moves an entry to its branch's current commit.
"""


@dataclass(frozen=True)
class Pin:
    """One locked repository: its commit, the branch it was read from and when."""

    commit: str
    branch: str = "main"
    resolved_at: str = ""


def repo_key(repo_type: str, repo: str) -> str:
    """The lock's key of a hub repository, e.g. 'model imageomics/biocap'."""
    return f"{repo_type} {repo}"


def lock_path(config_path: str | Path) -> Path:
    """The lock file beside a config: `x.yaml` -> `x.lock`."""
    path = Path(config_path)
    stem = path.name.removesuffix(".yaml").removesuffix(".yml")
    return path.with_name(stem + LOCK_SUFFIX)


def _pin(path: Path, key: str, entry: object) -> Pin:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("commit"), str):
        raise VlbenchError(f"{path}: pins.{key} must be a mapping with a 'commit'")
    if not COMMIT_PATTERN.match(entry["commit"]):
        raise VlbenchError(
            f"{path}: pins.{key}.commit must be a 40-hex commit sha, not {entry['commit']!r}"
        )
    return Pin(entry["commit"], str(entry.get("branch", "main")), str(entry.get("resolved_at", "")))


def read_lock(path: str | Path) -> dict[str, Pin]:
    """The pins of a lock file ({} when it does not exist); one-line errors name the key."""
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        data = load_yaml(path.read_text(encoding="utf-8")) or {}
    except DuplicateKeyError as exc:
        raise VlbenchError(exc.where(path)) from exc
    except yaml.YAMLError as exc:
        raise VlbenchError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from exc
    if not isinstance(data, Mapping) or data.get("version") != VERSION:
        raise VlbenchError(f"{path}: not a vlbench lock file (expected 'version: {VERSION}')")
    pins = data.get("pins") or {}
    if not isinstance(pins, Mapping):
        raise VlbenchError(f"{path}: 'pins' must be a mapping of repositories to commits")
    return {str(key): _pin(path, key, entry) for key, entry in pins.items()}


def write_lock(path: str | Path, pins: Mapping[str, Pin], config_name: str) -> None:
    """Write the lock file atomically, entries sorted (stable diffs)."""
    body = {
        "version": VERSION,
        "pins": {
            key: {"commit": pin.commit, "branch": pin.branch, "resolved_at": pin.resolved_at}
            for key, pin in sorted(pins.items())
        },
    }
    text = HEADER.format(config=config_name) + yaml.safe_dump(body, sort_keys=False)
    write_text(path, text)
