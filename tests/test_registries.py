"""One registry per concept: every enum of the config schema is checked here against the code
that owns the concept, so a new protocol, format, adapter or choice is written in its registry
and the schema, and this test says when the two disagree."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, get_args

import pytest
from workflow_helpers import SCHEMA

from vlbench.config import load_schema


def _protocols() -> Iterable[str]:
    from vlbench.protocols import PROTOCOLS

    return PROTOCOLS


def _formats() -> Iterable[str]:
    from vlbench.data.sources import FORMATS

    return FORMATS


def _adapters() -> Iterable[str]:
    from vlbench.embedding.models.dispatch import ADAPTERS

    return ADAPTERS


def _precisions() -> Iterable[str]:
    from vlbench.embedding.models.base import PRECISIONS

    return PRECISIONS


def _storage_dtypes() -> Iterable[str]:
    from vlbench.embedding.shard_files import STORAGE_DTYPES

    return STORAGE_DTYPES


def _tie_policies() -> Iterable[str]:
    from vlbench.rank.exact import TiePolicy

    return get_args(TiePolicy)


def _image_projections() -> Iterable[str]:
    from vlbench.embedding.models.projections import IMAGE_PROJECTIONS

    return IMAGE_PROJECTIONS


def _repo_types() -> Iterable[str]:
    from vlbench.embedding.models.hub import REPO_TYPES

    return REPO_TYPES


def _text_types() -> Iterable[str]:
    from vlbench.data.sources.classification import TEXT_TYPES

    return TEXT_TYPES


def _template_sets() -> Iterable[str]:
    from vlbench.data.sources.classification import TEMPLATE_SETS

    return TEMPLATE_SETS


def _image_policies() -> Iterable[str]:
    from vlbench.data.sources.writer import IMAGE_POLICIES

    return IMAGE_POLICIES


def _convert_choices() -> Iterable[str]:
    from vlbench.data.decode_policy import CONVERT_CHOICES

    return CONVERT_CHOICES


# Where each enum sits in the schema -> the registry that owns its values.
SCHEMA_ENUMS: dict[str, Callable[[], Iterable[str]]] = {
    "$defs.benchmark.properties.protocol": _protocols,
    # The hub and the local form of a source share one layout block (a YAML anchor).
    "$defs.source.oneOf.0.properties.format": _formats,
    "$defs.source.oneOf.1.properties.format": _formats,
    "$defs.model.properties.adapter": _adapters,
    "$defs.model.properties.precision": _precisions,
    "$defs.model.properties.image_projection": _image_projections,
    "$defs.model.properties.repo_type": _repo_types,
    "properties.embedding.properties.storage_dtype": _storage_dtypes,
    "properties.ranking.properties.tie_policy": _tie_policies,
    "$defs.benchmark.properties.text_type": _text_types,
    "$defs.benchmark.properties.templates": _template_sets,
    "$defs.benchmark.properties.image_policy": _image_policies,
    "$defs.benchmark.properties.decode.properties.convert": _convert_choices,
}


def schema_node(path: str) -> Any:
    node: Any = load_schema(SCHEMA)
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


@pytest.mark.parametrize("path", list(SCHEMA_ENUMS))
def test_the_schemas_enum_is_its_registry(path: str) -> None:
    assert sorted(schema_node(path)["enum"]) == sorted(SCHEMA_ENUMS[path]())


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
    # keys, and the column roles of the annotation-file sources.
    own = {
        "properties.missing_data",
        "properties.pins",
        "$defs.source.oneOf.0.properties.columns.propertyNames",
        "$defs.source.oneOf.1.properties.columns.propertyNames",
    }
    assert set(enums(load_schema(SCHEMA), "")) - own == set(SCHEMA_ENUMS)
