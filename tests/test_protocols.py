"""The protocol registry is the one list of protocols: formats and stages agree with it."""

from __future__ import annotations

import pytest

from vlbench.data.sources import FORMATS, default_format
from vlbench.errors import VlbenchError
from vlbench.metrics.specs import METRIC_FAMILIES, protocol_metrics
from vlbench.protocols import DIRECTIONS, PROTOCOLS, protocol
from vlbench.rank.protocol_ranks import RANKINGS


def test_every_protocol_is_fed_by_formats_and_has_at_most_one_default() -> None:
    for name in PROTOCOLS:
        fed_by = [key for key, entry in FORMATS.items() if entry.protocol == name]
        assert fed_by, name
        defaults = [key for key in fed_by if FORMATS[key].default]
        assert len(defaults) <= 1 and default_format(name) == (defaults or [None])[0]
    assert {entry.protocol for entry in FORMATS.values()} <= set(PROTOCOLS)


def test_every_record_names_known_directions_rankings_and_metrics() -> None:
    for record in PROTOCOLS.values():
        assert set(record.directions) <= set(DIRECTIONS)
        assert record.ranking in RANKINGS
        assert record.metrics in METRIC_FAMILIES
        assert protocol_metrics(record, [1, 10])


def test_an_unknown_protocol_is_one_line() -> None:
    with pytest.raises(VlbenchError, match=r"unknown protocol 'pairs' \(known: paired, "):
        protocol("pairs")
