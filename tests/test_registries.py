"""One registry per concept: every enum of the config schema is checked here against the code
that owns the concept, so a new protocol, format, adapter or choice is written in its registry
and the schema, and this test says when the two disagree."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any, get_args

import pytest
from workflow_helpers import SCHEMA

from vlbench.config import load_schema

# Where each enum sits in the schema -> the registry that owns its values (module, name).
SCHEMA_ENUMS: dict[str, tuple[str, str]] = {
    "$defs.benchmark.properties.protocol": ("vlbench.protocols", "PROTOCOLS"),
    # The hub and the local form of a source share one layout block (a YAML anchor).
    "$defs.source.oneOf.0.properties.format": ("vlbench.data.sources", "FORMATS"),
    "$defs.source.oneOf.1.properties.format": ("vlbench.data.sources", "FORMATS"),
    "$defs.model.properties.adapter": ("vlbench.embedding.models.dispatch", "ADAPTERS"),
    "$defs.model.properties.precision": ("vlbench.embedding.models.base", "PRECISIONS"),
    "$defs.model.properties.image_projection": (
        "vlbench.embedding.models.projections",
        "IMAGE_PROJECTIONS",
    ),
    "$defs.model.properties.repo_type": ("vlbench.embedding.models.hub", "REPO_TYPES"),
    "properties.embedding.properties.storage_dtype": (
        "vlbench.embedding.shard_files",
        "STORAGE_DTYPES",
    ),
    "properties.ranking.properties.tie_policy": ("vlbench.rank.exact", "TiePolicy"),
    "properties.embedding.properties.jobs": ("vlbench.config", "EMBED_JOB_SHAPES"),
    "$defs.benchmark.properties.text_type": ("vlbench.data.sources.classification", "TEXT_TYPES"),
    "$defs.benchmark.properties.templates": (
        "vlbench.data.sources.classification",
        "TEMPLATE_SETS",
    ),
    "$defs.benchmark.properties.image_policy": ("vlbench.data.sources.writer", "IMAGE_POLICIES"),
    "$defs.benchmark.properties.decode.properties.convert": (
        "vlbench.data.decode_policy",
        "CONVERT_CHOICES",
    ),
    "$defs.benchmark.properties.importer": ("vlbench.data.importers", "IMPORTERS"),
    "$defs.benchmark.properties.fewshot.properties.shuffle": (
        "vlbench.metrics.fewshot",
        "SHUFFLES",
    ),
}


def registry(module: str, name: str) -> list[str]:
    """The values a registry holds: its keys or items, or the choices of a Literal type."""
    value = getattr(importlib.import_module(module), name)
    return list(get_args(value) or value)


def schema_node(path: str) -> Any:
    node: Any = load_schema(SCHEMA)
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


@pytest.mark.parametrize("path", list(SCHEMA_ENUMS))
def test_the_schemas_enum_is_its_registry(path: str) -> None:
    assert sorted(schema_node(path)["enum"]) == sorted(registry(*SCHEMA_ENUMS[path]))


def test_every_enum_of_the_schema_is_checked_here() -> None:
    """A new enum in the schema needs its registry named above."""

    def enums(node: Any, path: str) -> Iterable[str]:
        if isinstance(node, dict):
            if "enum" in node:
                yield path
            for key, value in node.items():
                yield from enums(value, f"{path}.{key}" if path else key)
        elif isinstance(node, list):
            for index, value in enumerate(node):
                yield from enums(value, f"{path}.{index}")

    # Enums that are only the schema's (no code lists them): the choices of two top-level
    # keys, and the column roles of the annotation-file sources and reference files.
    own = {
        "properties.missing_data",
        "properties.pins",
        "$defs.source.oneOf.0.properties.columns.propertyNames",
        "$defs.source.oneOf.1.properties.columns.propertyNames",
        "$defs.source.oneOf.0.properties.reference.properties.columns.propertyNames",
        "$defs.source.oneOf.1.properties.reference.properties.columns.propertyNames",
    }
    assert set(enums(load_schema(SCHEMA), "")) - own == set(SCHEMA_ENUMS)
