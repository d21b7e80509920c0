"""Source formats: each reads one published layout into vlbench.data.sources.records.SourceData.

`FORMATS` is the one registry of formats: for each, the protocol it feeds, how it is read, what
is fetched from the hub, how its images are decoded (as its reference code does), how the
preflight table describes the layout, and whether a source of its protocol that names no format
is read with it. The config schema's `format` enum is checked against it
(tests/test_registries.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlbench.data.decode_policy import LEGACY, DecodePolicy, resolve_policy
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
from vlbench.protocols import MULTI_POSITIVE, PAIRED, RERANK, TAXON_CANDIDATES, ZEROSHOT

Loader = Callable[[Path, dict[str, Any], dict[str, Any], str], SourceData]


@dataclass(frozen=True)
class SourceFormat:
    """One layout: the protocol it feeds, its loader and hub files, its images' decode policy
    (`vlbench.data.decode_policy`; config/README.md names each reference), the preflight's
    description of it, and whether it is its protocol's default."""

    protocol: str
    load: Loader
    hub_patterns: Callable[[dict[str, Any]], Any] | None
    decode: DecodePolicy
    layout: str
    default: bool = False


def _listed(*keys: str) -> Callable[[dict[str, Any]], list[str]]:
    return lambda source: [source[key] for key in keys if source.get(key)]


FORMATS: dict[str, SourceFormat] = {
    "hf_parquet": SourceFormat(
        PAIRED,
        hf_parquet.load,
        hf_parquet.hub_patterns,
        LEGACY,
        "the hub repository's layout: data/<split>-*.parquet",
        default=True,
    ),
    "annotation_csv": SourceFormat(
        PAIRED,
        csv_pairs.load,
        None,
        DecodePolicy(exif=False, convert="before"),
        "the annotation CSV (id, source_url, captions, md5) + <images>/<id>.jpg",
    ),
    "nlphuji_csv_zip": SourceFormat(
        MULTI_POSITIVE,
        flickr_coco.load_nlphuji,
        _listed("annotations", "archive"),
        DecodePolicy(exif=True, convert="after"),
        "the CSV with a caption list + the image zip",
    ),
    "clip_benchmark_wds": SourceFormat(
        MULTI_POSITIVE,
        flickr_coco.load_wds,
        lambda source: [f"{source.get('split', 'test')}/*"],
        DecodePolicy(exif=False, convert="before"),
        "webdataset tar shards <split>/<n>.tar",
    ),
    "karpathy_json": SourceFormat(
        MULTI_POSITIVE,
        flickr_coco.load_karpathy,
        None,
        DecodePolicy(exif=False, convert="before"),
        "the Karpathy split JSON + the image folder",
    ),
    "biovita": SourceFormat(
        TAXON_CANDIDATES,
        biovita.load,
        biovita.hub_patterns,
        LEGACY,
        "the hub repository's layout (MTEB BioVITA parquet configs)",
        default=True,
    ),
    "biovita_t2i": SourceFormat(
        TAXON_CANDIDATES,
        biovita.load_t2i,
        biovita.hub_patterns,
        LEGACY,
        "the hub repository's layout (MTEB BioVITA parquet configs, taxon-name queries)",
    ),
    "imagefolder_csv": SourceFormat(
        ZEROSHOT,
        classification.load,
        classification.hub_patterns,
        DecodePolicy(exif=False, convert="before_if_rgba_or_p"),
        "a metadata CSV (filepath,class or the named columns) + the images",
        default=True,
    ),
    "inquire": SourceFormat(
        RERANK,
        inquire.load,
        hf_parquet.hub_patterns,
        DecodePolicy(exif=True, convert="after"),
        "the hub repository's layout (INQUIRE-Rerank parquet)",
        default=True,
    ),
}


def default_format(protocol: str) -> str | None:
    """The format a source of `protocol` is read with when it names none (None: required)."""
    return next(
        (name for name, entry in FORMATS.items() if entry.protocol == protocol and entry.default),
        None,
    )


def format_name(protocol: str, source: Mapping[str, Any]) -> str | None:
    """The format a source is read with: its own `format`, else its protocol's default."""
    return source.get("format") or default_format(protocol)


def source_format(protocol: str, source: dict[str, Any], where: str) -> tuple[str, SourceFormat]:
    """The format a benchmark's source is read with, checked against its protocol."""
    name = format_name(protocol, source)
    if name is None:
        raise VlbenchError(f"{where}.format is required for protocol {protocol!r}")
    if name not in FORMATS:
        raise VlbenchError(f"{where}.format: unknown format {name!r} (known: {', '.join(FORMATS)})")
    feeds = FORMATS[name].protocol
    if feeds != protocol:
        raise VlbenchError(f"{where}.format {name!r} feeds protocol {feeds!r}, not {protocol!r}")
    return name, FORMATS[name]


def format_policy(
    name: str, override: Mapping[str, Any] | None, where: str = "benchmark"
) -> DecodePolicy:
    """A format's decode policy with the config's `decode` keys (if any) put over it."""
    if name not in FORMATS:
        raise VlbenchError(f"{where}: no decode policy for format {name!r}")
    return resolve_policy(FORMATS[name].decode, override, where)
