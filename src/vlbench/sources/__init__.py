"""Source formats: each reads one published layout into vlbench.sources.records.SourceData."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlbench.errors import VlbenchError
from vlbench.sources import biovita, classification, csv_pairs, flickr_coco, hf_parquet, inquire
from vlbench.sources.records import SourceData

Loader = Callable[[Path, dict[str, Any], dict[str, Any], str], SourceData]


@dataclass(frozen=True)
class SourceFormat:
    """How to read one layout, which protocol it feeds, and what to fetch from the hub."""

    load: Loader
    protocol: str
    hub_patterns: Callable[[dict[str, Any]], Any] | None


def _listed(*keys: str) -> Callable[[dict[str, Any]], list[str]]:
    return lambda source: [source[key] for key in keys if source.get(key)]


FORMATS: dict[str, SourceFormat] = {
    "hf_parquet": SourceFormat(hf_parquet.load, "paired", hf_parquet.hub_patterns),
    "biovita": SourceFormat(biovita.load, "taxon_candidates", biovita.hub_patterns),
    "inquire": SourceFormat(inquire.load, "rerank", hf_parquet.hub_patterns),
    "imagefolder_csv": SourceFormat(classification.load, "zeroshot", classification.hub_patterns),
    "annotation_csv": SourceFormat(csv_pairs.load, "paired", None),
    "nlphuji_csv_zip": SourceFormat(
        flickr_coco.load_nlphuji, "multi_positive", _listed("annotations", "archive")
    ),
    "clip_benchmark_wds": SourceFormat(
        flickr_coco.load_wds,
        "multi_positive",
        lambda source: [f"{source.get('split', 'test')}/*"],
    ),
    "karpathy_json": SourceFormat(flickr_coco.load_karpathy, "multi_positive", None),
}
DEFAULT_FORMAT = {
    "paired": "hf_parquet",
    "taxon_candidates": "biovita",
    "rerank": "inquire",
    "zeroshot": "imagefolder_csv",
}


def source_format(protocol: str, source: dict[str, Any], where: str) -> tuple[str, SourceFormat]:
    """The format a benchmark's source is read with, checked against its protocol."""
    name = source.get("format") or DEFAULT_FORMAT.get(protocol)
    if name is None:
        raise VlbenchError(f"{where}.format is required for protocol {protocol!r}")
    if name not in FORMATS:
        raise VlbenchError(f"{where}.format: unknown format {name!r} (known: {', '.join(FORMATS)})")
    found = FORMATS[name]
    if found.protocol != protocol:
        raise VlbenchError(
            f"{where}.format {name!r} feeds protocol {found.protocol!r}, not {protocol!r}"
        )
    return name, found
