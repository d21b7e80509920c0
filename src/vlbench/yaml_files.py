"""Read a YAML file whose top level must be a mapping, with one-line errors.

Every mapping is checked for a key given twice (plain YAML keeps the last one silently), so
a config with the same model under `models:` twice is refused with the line of the second one.
Config files may be JSON too (as Snakemake reads them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from vlbench.errors import VlbenchError

MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.YAMLError):
    """A mapping names the same key twice (lines are 1-based)."""

    def __init__(self, key: Any, line: int, first_line: int) -> None:
        super().__init__(f"duplicate key {key!r} at line {line} (first at line {first_line})")
        self.key, self.line, self.first_line = key, line, first_line

    def where(self, path: str | Path) -> str:
        return (
            f"{path}: line {self.line}: key {self.key!r} is given twice "
            f"(first at line {self.first_line}); remove or rename one of them"
        )


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a mapping with the same key twice.

    Keys brought in by a merge (`<<: *anchor`) may be overridden; only keys written out in
    the same mapping count.
    """

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # unhashable: the base constructor reports it
                    continue
                line = key_node.start_mark.line + 1
                if first is not None:
                    raise DuplicateKeyError(key, line, first)
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_yaml(stream: Any) -> Any:
    """yaml.safe_load, refusing duplicate keys (raises DuplicateKeyError)."""
    return yaml.load(stream, Loader=UniqueKeyLoader)  # a SafeLoader subclass: safe


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise VlbenchError(f"key {key!r} is given twice in one object")
        seen[key] = value
    return seen


def _json_or_none(text: str, path: Path) -> Any:
    """The JSON document in `text` (refusing a key given twice in one object), or None."""
    try:
        return json.loads(text, object_pairs_hook=_json_pairs)
    except VlbenchError as exc:
        raise VlbenchError(f"{path}: {exc} (JSON config)") from exc
    except ValueError:
        return None


def read_yaml_mapping(path: str | Path, what: str) -> dict[str, Any]:
    """The mapping in `path`; `what` names the file in errors ("config file", "reference map")."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise VlbenchError(f"{what} not found: {path}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise VlbenchError(f"{what} {path}: cannot be read ({exc})") from exc
    try:
        data = load_yaml(text) or {}
    except DuplicateKeyError as exc:
        raise VlbenchError(exc.where(path)) from exc
    except yaml.YAMLError as exc:
        data = _json_or_none(text, path)  # JSON that is not YAML (tabs), as Snakemake reads it
        if data is None:
            raise VlbenchError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from exc
    if not isinstance(data, dict):
        raise VlbenchError(f"{path}: the top level of a {what} must be a mapping")
    return data
