"""The protocol registry is the one list of protocols: the schema, formats and stages agree."""

from __future__ import annotations

import pytest
from workflow_helpers import SCHEMA

from vlbench.config import load_schema
from vlbench.data.sources import FORMATS
from vlbench.errors import VlbenchError
from vlbench.metrics.specs import METRIC_FAMILIES, protocol_metrics
from vlbench.protocols import DIRECTIONS, PROTOCOLS, protocol, protocol_of_format
from vlbench.rank.protocol_ranks import RANKINGS


def test_the_schemas_protocol_enum_is_the_registry() -> None:
    schema = load_schema(SCHEMA)
    enum = schema["$defs"]["benchmark"]["properties"]["protocol"]["enum"]
    assert enum == list(PROTOCOLS)


def test_every_source_format_feeds_exactly_one_protocol() -> None:
    schema = load_schema(SCHEMA)
    layout = schema["$defs"]["source"]["oneOf"][0]["properties"]
    assert sorted(layout["format"]["enum"]) == sorted(FORMATS)
    fed = [name for record in PROTOCOLS.values() for name in record.formats]
    assert sorted(fed) == sorted(FORMATS)
    for record in PROTOCOLS.values():
        assert record.default_format in (None, *record.formats)
        for name in record.formats:
            assert protocol_of_format(name) is record


def test_every_record_names_known_directions_rankings_and_metrics() -> None:
    for record in PROTOCOLS.values():
        assert set(record.directions) <= set(DIRECTIONS)
        assert record.ranking in RANKINGS
        assert record.metrics in METRIC_FAMILIES
        assert protocol_metrics(record.name, [1, 10])


def test_an_unknown_protocol_is_one_line() -> None:
    with pytest.raises(VlbenchError, match=r"unknown protocol 'pairs' \(known: paired, "):
        protocol("pairs")


def test_the_schemas_adapter_enum_is_the_adapter_registry() -> None:
    from vlbench.embedding.models.dispatch import ADAPTERS

    enum = load_schema(SCHEMA)["$defs"]["model"]["properties"]["adapter"]["enum"]
    assert enum == list(ADAPTERS)
