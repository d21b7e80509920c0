"""Source formats: each reads one published layout into vlbench.data.sources.records.SourceData."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlbench.data.sources import (
    biovita,
    classification,
    csv_pairs,
    flickr_coco,
    hf_parquet,
    inquire,
)
from vlbench.data.sources.records import SourceData
from vlbench.errors import VlbenchError
from vlbench.protocols import protocol as protocol_record
from vlbench.protocols import protocol_of_format

Loader = Callable[[Path, dict[str, Any], dict[str, Any], str], SourceData]


@dataclass(frozen=True)
class SourceFormat:
    """How to read one layout and what to fetch from the hub (its protocol: the registry's)."""

    load: Loader
    hub_patterns: Callable[[dict[str, Any]], Any] | None


def _listed(*keys: str) -> Callable[[dict[str, Any]], list[str]]:
    return lambda source: [source[key] for key in keys if source.get(key)]


FORMATS: dict[str, SourceFormat] = {
    "hf_parquet": SourceFormat(hf_parquet.load, hf_parquet.hub_patterns),
    "biovita": SourceFormat(biovita.load, biovita.hub_patterns),
    "biovita_t2i": SourceFormat(biovita.load_t2i, biovita.hub_patterns),
    "inquire": SourceFormat(inquire.load, hf_parquet.hub_patterns),
    "imagefolder_csv": SourceFormat(classification.load, classification.hub_patterns),
    "annotation_csv": SourceFormat(csv_pairs.load, None),
    "nlphuji_csv_zip": SourceFormat(flickr_coco.load_nlphuji, _listed("annotations", "archive")),
    "clip_benchmark_wds": SourceFormat(
        flickr_coco.load_wds, lambda source: [f"{source.get('split', 'test')}/*"]
    ),
    "karpathy_json": SourceFormat(flickr_coco.load_karpathy, None),
}


def source_format(protocol: str, source: dict[str, Any], where: str) -> tuple[str, SourceFormat]:
    """The format a benchmark's source is read with, checked against its protocol."""
    name = source.get("format") or protocol_record(protocol).default_format
    if name is None:
        raise VlbenchError(f"{where}.format is required for protocol {protocol!r}")
    if name not in FORMATS:
        raise VlbenchError(f"{where}.format: unknown format {name!r} (known: {', '.join(FORMATS)})")
    feeds = protocol_of_format(name).name
    if feeds != protocol:
        raise VlbenchError(f"{where}.format {name!r} feeds protocol {feeds!r}, not {protocol!r}")
    return name, FORMATS[name]
