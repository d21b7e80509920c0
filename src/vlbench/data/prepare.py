"""Prepare any configured benchmark source into the canonical layout (vlbench.data.canonical)."""

from __future__ import annotations

import csv
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pyarrow as pa

from vlbench.config import source_kind
from vlbench.data.decode_policy import resolve_policy
from vlbench.data.sources import source_format
from vlbench.data.sources.download import fetch_snapshot
from vlbench.data.sources.reference_files import fetch_reference
from vlbench.data.sources.writer import write_canonical
from vlbench.errors import VlbenchError, require_path
from vlbench.protocols import protocol as protocol_record

# Failures of corrupt or malformed source files, turned into one-line errors.
UNREADABLE = (
    pa.ArrowException,
    OSError,
    zipfile.BadZipFile,
    tarfile.TarError,
    csv.Error,
    UnicodeDecodeError,
    KeyError,
    ValueError,
)
LAYOUT_KEYS = (
    "format",
    "config",
    "subset",
    "annotations",
    "images",
    "archive",
    "image_name",
    "reference",
)
# The formats that can read a reference evaluation's own annotation file (`source.reference`).
REFERENCE_FORMATS = ("imagefolder_csv",)


def _provenance(source: dict[str, Any], kind: str, root: Path) -> dict[str, Any]:
    split = source.get("split", "test")
    meta: dict[str, Any] = {"source": kind, "split": split, "subset": source.get("subset", split)}
    if kind == "hub":
        meta.update(repo=source["repo"], revision=source["revision"])
    else:
        meta.update(path=str(root), revision=None)
    if kind == "synthetic":
        meta.update(source["synthetic"])
    meta.update({key: source[key] for key in LAYOUT_KEYS if key in source and key != "subset"})
    return meta


def prepare_benchmark(
    benchmark: str,
    protocol: str,
    source: dict[str, Any],
    local_dir: str | Path | None,
    out_dir: str | Path,
    settings: dict[str, Any] | None = None,
    cache_dir: str | Path | None = None,
    threads: int = 1,
) -> dict[str, Any]:
    """Locate the source (downloading pinned hub files if needed), read, validate and write it.

    `settings` are the benchmark's protocol options (text_type, templates, prompt_prefix,
    image_policy, decode: the config's override of the format's decode policy). `threads`
    images are decoded at once to check them under image_policy: skip (the job's Snakemake
    threads, config key prepare.threads); the output does not depend on it.
    Returns the benchmark.json content.
    """
    settings = settings or {}
    protocol_record(protocol)  # an unknown protocol is a one-line error
    where = f"benchmarks.{benchmark}.source"
    name, layout = source_format(protocol, source, where)
    decode = resolve_policy(layout.decode, settings.get("decode"), f"benchmarks.{benchmark}")
    kind = source_kind(source)
    read = dict(source)
    if "reference" in source:
        if name not in REFERENCE_FORMATS:
            raise VlbenchError(
                f"{where}.reference: format {name!r} does not read a reference annotation file "
                f"(formats that do: {', '.join(REFERENCE_FORMATS)})"
            )
        local = fetch_reference(source["reference"], f"{where}.reference")
        read["reference"] = {**source["reference"], "local": str(local)}
    if kind == "hub":
        if layout.hub_patterns is None:
            raise VlbenchError(f"{where}: format {name!r} is read from a local path, not the hub")
        root = fetch_snapshot(
            source["repo"],
            source.get("revision", ""),
            layout.hub_patterns(source),
            cache_dir=cache_dir,
            verify=source.get("verify", True),
            where=f"{where}.revision",
        )
    else:
        root = require_path(local_dir or source.get("path", ""), f"{where}.path", directory=True)
    try:
        data = layout.load(root, read, settings, where)
        return write_canonical(
            data,
            protocol,
            out_dir,
            _provenance({**source, "format": name}, kind, root),
            image_policy=settings.get("image_policy", "fail"),
            expected=source.get("expected"),
            where=f"benchmarks.{benchmark}",
            threads=threads,
            decode=decode,
        )
    except UNREADABLE as exc:
        raise VlbenchError(f"{where}: cannot read {root} ({type(exc).__name__}: {exc})") from exc
