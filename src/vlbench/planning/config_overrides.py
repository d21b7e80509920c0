"""Settings for one run from the command line (`--config`), typed by the config schema.

Snakemake hands `--config key=value` over as it parsed it: a plain value as a number, bool or
string, but a YAML or JSON mapping (`embedding='{batch_size: 32}'`) with every value inside as
a string (it reads them with YAML's base loader). Here each value takes the type the schema
gives its key (`'32'` -> 32 for an integer, `'true'` -> True for a boolean, `'null'` -> None
where null is allowed), and a string where the schema wants a mapping or a list is read as
YAML. `vlbench preflight --config` also takes dotted keys (`embedding.batch_size=32`), which
Snakemake's own command line refuses before the workflow is read.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from typing import Any

import jsonschema
import yaml

from vlbench.errors import VlbenchError

SOURCE = "--config"
INTEGER = re.compile(r"[-+]?\d+")
NULLS = ("null", "Null", "NULL", "~")


def merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """Merge `update` into `base` in place, mappings key by key (as Snakemake merges configs)."""
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def parse_assignments(assignments: Iterable[str]) -> dict[str, Any]:
    """`key=value` strings (dotted keys for nested settings) as one nested mapping, the values
    read as Snakemake reads them (YAML's base loader: every scalar a string)."""
    overrides: dict[str, Any] = {}
    for assignment in assignments:
        key, equals, text = assignment.partition("=")
        parts = key.strip().split(".")
        if not equals or not all(parts):
            raise VlbenchError(
                f"{SOURCE} {assignment!r}: expected key=value (a dotted key such as "
                "embedding.batch_size=32 sets a nested setting)"
            )
        try:
            value = yaml.load(text, Loader=yaml.BaseLoader) if text else None
        except yaml.YAMLError as exc:
            raise VlbenchError(
                f"{SOURCE} {assignment!r}: not valid YAML ({' '.join(str(exc).split())})"
            ) from exc
        for part in reversed(parts[1:]):
            value = {part: value}
        merge(overrides, {parts[0]: value})
    return overrides


class _Schema:
    """The config schema, with its `$ref`s followed."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.root = schema

    def resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        while "$ref" in schema:
            node: Any = self.root
            for part in schema["$ref"].removeprefix("#/").split("/"):
                node = node[part]
            schema = node
        return schema

    def child(self, schema: Mapping[str, Any], key: str) -> Mapping[str, Any]:
        """The schema of `key` in an object described by `schema` ({} when unknown)."""
        properties = schema.get("properties", {})
        if key in properties:
            return properties[key]
        extra = schema.get("additionalProperties")
        return extra if isinstance(extra, Mapping) else {}


def _types(schema: Mapping[str, Any]) -> set[str]:
    kind = schema.get("type", [])
    return {kind} if isinstance(kind, str) else set(kind)


def _scalar(text: str, schema: Mapping[str, Any]) -> Any:
    """A string from the command line as the type the schema asks for (unchanged if none fits)."""
    types, enum = _types(schema), schema.get("enum")
    if "null" in types and text in NULLS:
        return None
    if "string" in types or (enum is not None and text in enum):
        return text
    if types & {"object", "array"}:
        try:
            return yaml.load(text, Loader=yaml.BaseLoader)
        except yaml.YAMLError:
            return text
    if "integer" in types and INTEGER.fullmatch(text):
        return int(text)
    if "number" in types:
        try:
            return float(text)
        except ValueError:
            return text
    if "boolean" in types and text.lower() in ("true", "false"):
        return text.lower() == "true"
    for choice in enum or ():
        if str(choice) == text:
            return choice
    return text


def type_by_schema(value: Any, schema: Mapping[str, Any], resolver: _Schema) -> Any:
    """`value` with every string typed as the schema says its key is."""
    schema = resolver.resolve(schema)
    branches = schema.get("oneOf") or schema.get("anyOf")
    if branches:
        return _typed_branch(value, branches, resolver)
    if isinstance(value, str):
        value = _scalar(value, schema)
        if isinstance(value, str):
            return value
    if isinstance(value, Mapping):
        return {
            key: type_by_schema(item, resolver.child(schema, str(key)), resolver)
            for key, item in value.items()
        }
    if isinstance(value, list):
        items = schema.get("items", {})
        return [
            type_by_schema(item, items if isinstance(items, Mapping) else {}, resolver)
            for item in value
        ]
    return value


def _typed_branch(value: Any, branches: list[Mapping[str, Any]], resolver: _Schema) -> Any:
    """Typed by the first branch the value then fits, else by the branch its keys name."""
    typed = [type_by_schema(value, branch, resolver) for branch in branches]
    for candidate, branch in zip(typed, branches, strict=True):
        alone = {"$defs": resolver.root.get("$defs", {}), **resolver.resolve(branch)}
        validator = jsonschema.Draft202012Validator(alone)
        if validator.is_valid(candidate):
            return candidate
    for candidate, branch in zip(typed, branches, strict=True):
        required = resolver.resolve(branch).get("required", [])
        if isinstance(value, Mapping) and required and all(key in value for key in required):
            return candidate
    return value


def typed_overrides(overrides: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """The `--config` values typed by the config schema (see the module docstring)."""
    return type_by_schema(dict(overrides), schema, _Schema(schema))


def written_by(overrides: Mapping[str, Any], path: Iterable[str | int], keys: list[str]) -> bool:
    """Whether the value at `path` (or the `keys` at fault below it) came from `--config`."""
    node: Any = overrides
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    if not isinstance(node, Mapping):
        return True
    return any(key in node for key in keys) if keys else False
