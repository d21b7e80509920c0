"""Provenance of a benchmark's results: weights, data revision, libraries, device and timings."""

from __future__ import annotations

import csv
import html
import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vlbench.atomic import write_text
from vlbench.errors import VlbenchError
from vlbench.paths import TIMINGS_DIR
from vlbench.versions import package_versions

EMBEDDING_FIELDS = [
    "model_key",
    "modality",
    "model_name",
    "pretrained",
    "weights_sha256",
    "precision",
    "device",
    "device_name",
    "batch_size",
    "decode_policy",
    "rows",
    "seconds",
    "items_per_second",
    "torch",
    "open_clip",
    "numpy",
    "python",
    "host",
]
# A gathered matrix lists these per shard (`shard_files.merge_provenance`): shards may run on
# different devices and hosts.
SHARD_FIELDS = ("device", "device_name", "host")
# Version columns, read from an embedding's `versions` (distribution names where they differ).
VERSION_COLUMNS = ("torch", "open_clip", "numpy", "python")
VERSION_KEYS = {"open_clip": "open_clip_torch"}
DATASET_FIELDS = ["source", "repo", "path", "revision", "split", "protocol", "n_images", "n_texts"]
REPORT_PACKAGES = ["polars", "pyarrow", "faiss-cpu", "matplotlib", "scipy", "snakemake", "vlbench"]


def _read_json(path: str | Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError as exc:
        raise VlbenchError(f"provenance file not found: {path}") from exc
    except json.JSONDecodeError as exc:
        raise VlbenchError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc


def _distinct(values: Iterable[Any]) -> str | None:
    """The distinct non-empty values in first-seen order, joined by ";" (None if there are none)."""
    seen = dict.fromkeys(str(value) for value in values if value not in (None, ""))
    return ";".join(seen) or None


def embedding_row(path: str | Path) -> dict[str, Any]:
    """One row per embedding job, from results/embeddings/<model>/<benchmark>/<modality>.json.

    Device, device name and host come from the gathered file's `shards`, the distinct values
    joined by ";" when its shards ran in more than one place.
    """
    path = Path(path)
    record = _read_json(path)
    model = record.get("model") or {}
    versions = record.get("versions") or {}
    row = {
        "model_key": path.parent.parent.name,
        "modality": path.stem,
        "model_name": model.get("name"),
        "pretrained": model.get("pretrained"),
    }
    row.update({name: record.get(name) for name in EMBEDDING_FIELDS if name not in row})
    shards = [shard for shard in record.get("shards") or [] if isinstance(shard, dict)]
    for name in SHARD_FIELDS:
        if row.get(name) in (None, "") and shards:
            row[name] = _distinct(shard.get(name) for shard in shards)
    row.update({name: versions.get(VERSION_KEYS.get(name, name)) for name in VERSION_COLUMNS})
    decode = record.get("decode_policy")
    if isinstance(decode, dict):  # image embeddings: EXIF applied or not, when RGB conversion runs
        exif = str(decode.get("exif")).lower()
        row["decode_policy"] = f"exif={exif} convert={decode.get('convert')}"
    return row


def read_snakemake_benchmark(path: str | Path) -> dict[str, Any]:
    """The one row of a Snakemake `benchmark:` TSV (seconds, max_rss in MB, ...)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    if len(lines) < 2:
        return {}
    row: dict[str, Any] = {}
    for key, value in zip(lines[0].split("\t"), lines[-1].split("\t"), strict=False):
        try:
            row[key] = float(value)
        except ValueError:
            row[key] = value
    return row


def timing_rows(timing_files: Iterable[str | Path], root: str | Path = TIMINGS_DIR) -> list[dict]:
    """Snakemake benchmark files (`<root>/<rule>/<job>.tsv`): rule, job, seconds, peak RSS (MB)."""
    rows = []
    for path in sorted(map(Path, timing_files)):
        parts = path.relative_to(root).parts
        record = read_snakemake_benchmark(path)
        if "s" not in record:
            continue
        rss = record.get("max_rss")
        rows.append(
            {
                "rule": parts[0],
                "job": "/".join(Path(*parts[1:]).with_suffix("").parts),
                "seconds": round(record["s"], 3),
                "max_rss_mb": round(rss, 1) if isinstance(rss, float) else None,
            }
        )
    return rows


def collect_provenance(
    benchmark: str,
    benchmark_json: str | Path,
    embedding_jsons: Iterable[str | Path],
    timing_files: Iterable[str | Path],
    timings_root: str | Path = TIMINGS_DIR,
) -> dict[str, Any]:
    """Everything the report shows about how a benchmark's numbers were produced (the timing
    files: the `benchmark:` files of its jobs, under `timings_root`)."""
    meta = _read_json(benchmark_json)
    return {
        "benchmark": benchmark,
        "dataset": {name: meta.get(name) for name in DATASET_FIELDS},
        "embeddings": sorted(
            (embedding_row(path) for path in embedding_jsons),
            key=lambda row: (row["model_key"], row["modality"]),
        ),
        "timings": timing_rows(timing_files, timings_root),
        "report_environment": package_versions(REPORT_PACKAGES),
    }


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def provenance_csv(record: dict[str, Any]) -> str:
    """One row per embedding job, with the dataset's source and revision repeated on each."""
    buffer = io.StringIO()
    fields = ["benchmark", *(f"dataset_{name}" for name in DATASET_FIELDS), *EMBEDDING_FIELDS]
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    dataset = {f"dataset_{name}": value for name, value in record["dataset"].items()}
    for row in record["embeddings"]:
        writer.writerow({"benchmark": record["benchmark"], **dataset, **row})
    return buffer.getvalue()


def _html_table(rows: list[dict[str, Any]], fields: list[str]) -> str:
    escape = html.escape
    head = "".join(f"<th>{escape(field)}</th>" for field in fields)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(_text(row.get(f)))}</td>" for f in fields) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def provenance_html(record: dict[str, Any]) -> str:
    """A standalone HTML page of a benchmark's provenance (for the Snakemake report)."""
    escape = html.escape
    dataset = [{"key": k, "value": v} for k, v in record["dataset"].items()]
    environment = [{"package": k, "version": v} for k, v in record["report_environment"].items()]
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>Provenance: {escape(record['benchmark'])}</title>"
        "<style>body{font-family:sans-serif}table{border-collapse:collapse;margin-bottom:1em}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%}</style></head><body>"
        f"<h2>Provenance: {escape(record['benchmark'])}</h2>"
        "<h3>Dataset</h3>" + _html_table(dataset, ["key", "value"]) + "<h3>Embedding jobs "
        "(weights, precision, device, batch size, library versions, time)</h3>"
        + _html_table(record["embeddings"], EMBEDDING_FIELDS)
        + "<h3>Job timings (Snakemake benchmark files)</h3>"
        + _html_table(record["timings"], ["rule", "job", "seconds", "max_rss_mb"])
        + "<h3>Tables and plots made with</h3>"
        + _html_table(environment, ["package", "version"])
        + "</body></html>\n"
    )


def write_provenance(record: dict[str, Any], csv_path: str | Path, html_path: str | Path) -> None:
    """Write the CSV and HTML views of a provenance record."""
    write_text(csv_path, provenance_csv(record))
    write_text(html_path, provenance_html(record))
