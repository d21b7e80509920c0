"""Embed one shard (a contiguous row range) of a modality; plan shards; gather them into one matrix.

A shard is written as ``shard-XXXXX.npy`` (the matrix, float32 or float16), ``.ids.parquet`` and
``.json`` (provenance), each atomically, the matrix last. Shards are independent jobs: any number
can run at once on different GPUs, and a rerun recomputes only the missing ones.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from tqdm import tqdm

from vlbench.atomic import atomic_path, write_text
from vlbench.canonical import ID_COLUMNS
from vlbench.embed_loader import (
    ImageChunks,
    plan_chunks,
    read_id_range,
    stream_image_chunks,
)
from vlbench.errors import VlbenchError
from vlbench.image_transform import ImagePipeline
from vlbench.models import EmbeddingModel
from vlbench.pixel_cache import PixelCache, PixelShardWriter

IDS_SCHEMA = pa.schema([("id", pa.string())])
STORAGE_DTYPES = {"float32": np.float32, "float16": np.float16}


@dataclass(frozen=True)
class EmbedSettings:
    """How a shard is embedded: the config's `embedding` section plus the benchmark's name."""

    benchmark: str
    batch_size: int = 64
    num_workers: int = 0
    storage_dtype: str = "float32"
    pixel_cache: bool = True
    draft_decode: bool = False
    pixel_cache_dir: str = "results/pixels"

    @classmethod
    def from_config(
        cls, benchmark: str, embedding: Mapping[str, Any], **extra: Any
    ) -> EmbedSettings:
        """Settings from a validated `embedding` config section."""
        known = {key: embedding[key] for key in cls.__dataclass_fields__ if key in embedding}
        return cls(benchmark=benchmark, **{**known, **extra})


def shard_name(index: int) -> str:
    """The file stem of shard `index`."""
    return f"shard-{index:05d}"


def shard_ranges(rows: int, shard_size: int) -> list[tuple[int, int]]:
    """Row ranges [start, stop) of consecutive shards of at most `shard_size` rows."""
    if shard_size < 1:
        raise VlbenchError(f"embedding.shard_size must be at least 1, got {shard_size}")
    return [(start, min(start + shard_size, rows)) for start in range(0, rows, shard_size)]


def write_shard_plan(source: str | Path, shard_size: int, out_path: str | Path) -> int:
    """Write a parquet's shard plan (row ranges from its metadata); return the shard count."""
    try:
        rows = pq.ParquetFile(source).metadata.num_rows
    except (OSError, pa.ArrowInvalid) as exc:
        raise VlbenchError(f"{source}: not a readable parquet file ({exc})") from exc
    if rows == 0:
        raise VlbenchError(f"{source}: no rows to embed")
    ranges = shard_ranges(rows, shard_size)
    plan = {
        "source": str(source),
        "rows": rows,
        "shard_size": shard_size,
        "shards": {shard_name(i): list(bounds) for i, bounds in enumerate(ranges)},
    }
    write_text(out_path, json.dumps(plan, indent=2) + "\n")
    return len(ranges)


def read_shard_plan(path: str | Path) -> dict[str, Any]:
    """A shard plan written by `write_shard_plan`."""
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def peak_rss_mb() -> float:
    """This process's peak resident memory in MiB.

    Reads VmHWM on Linux: `ru_maxrss` would also count the parent's memory at fork time.
    """
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def _cached_batches(pixels: np.ndarray, batch_size: int) -> Iterator[torch.Tensor]:
    for begin in range(0, len(pixels), batch_size):
        yield torch.from_numpy(np.array(pixels[begin : begin + batch_size]))


def image_input_batches(
    model: EmbeddingModel,
    source: Path,
    start: int,
    stop: int,
    settings: EmbedSettings,
    stats: dict[str, Any],
) -> Iterator[tuple[int, torch.Tensor]]:
    """Model-ready float32 batches of rows [start, stop): from the pixel cache or by decoding."""
    pipeline = ImagePipeline.from_model(model)
    stats["pixel_geometry"] = pipeline.summary
    cache = None
    if settings.pixel_cache and pipeline.cacheable:
        key = pipeline.geometry_key(settings.draft_decode)
        stats["geometry_key"] = key
        cache = PixelCache(settings.pixel_cache_dir, settings.benchmark, key, source)
        cached = cache.load(start, stop)
        if cached is not None:
            stats["pixel_cache"] = f"hit: {cache.shard_path(start, stop)}"
            for pixels in _cached_batches(cached, settings.batch_size):
                yield len(pixels), pipeline.to_model_input(pixels)
            return
        stats["pixel_cache"] = f"miss: wrote {cache.shard_path(start, stop)}"
    elif settings.pixel_cache:
        stats["pixel_cache"] = f"off: {pipeline.reason}"
    else:
        stats["pixel_cache"] = "off"
    dataset = ImageChunks(
        source,
        plan_chunks(source, start, stop, settings.batch_size),
        pipeline,
        draft=settings.draft_decode,
    )
    pin = model.device.type == "cuda"
    writer = PixelShardWriter(cache, start, stop) if cache is not None else None
    success = False
    try:
        for item in rebatch(
            stream_image_chunks(dataset, settings.num_workers, pin), settings.batch_size
        ):
            if "inputs" in item:
                yield len(item["inputs"]), item["inputs"]
                continue
            if writer is not None:
                writer.append(item["pixels"].numpy())
            yield len(item["pixels"]), pipeline.to_model_input(item["pixels"])
        success = True
    finally:
        if writer is not None and writer.close(success):
            cache.describe(
                {
                    "benchmark": settings.benchmark,
                    **pipeline.summary,
                    "steps": pipeline.geometry,
                    "draft_decode": settings.draft_decode,
                }
            )


def rebatch(items: Iterator[dict[str, Any]], batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
    """Regroup row-group-aligned chunks into batches of exactly `batch_size` rows (last: fewer).

    Forward passes then see the same batches whether pixels come from the cache or a decode.
    """
    pending: list[torch.Tensor] = []
    held = 0
    key = "pixels"
    for item in items:
        key = "inputs" if "inputs" in item else "pixels"
        pending.append(item[key])
        held += len(item[key])
        while held >= batch_size:
            merged = torch.cat(pending) if len(pending) > 1 else pending[0]
            yield {key: merged[:batch_size]}
            rest = merged[batch_size:]
            pending, held = ([rest], len(rest)) if len(rest) else ([], 0)
    if held:
        yield {key: torch.cat(pending) if len(pending) > 1 else pending[0]}


def text_batches(source: Path, start: int, stop: int, batch_size: int) -> Iterator[list[str]]:
    """Captions of rows [start, stop) in batches, reading only the row groups that hold them."""
    parquet = pq.ParquetFile(source)
    first = 0
    pending: list[str] = []
    for group in range(parquet.metadata.num_row_groups):
        rows = parquet.metadata.row_group(group).num_rows
        low, high = max(start, first), min(stop, first + rows)
        if low < high:
            column = parquet.read_row_group(group, columns=["text"]).column("text")
            pending.extend(column.slice(low - first, high - low).to_pylist())
            while len(pending) >= batch_size:
                yield pending[:batch_size]
                pending = pending[batch_size:]
        first += rows
    if pending:
        yield pending


def embed_rows(
    model: EmbeddingModel,
    modality: str,
    source: Path,
    start: int,
    stop: int,
    settings: EmbedSettings,
    stats: dict[str, Any] | None = None,
) -> tuple[list[str], np.ndarray]:
    """Embed rows [start, stop) of a canonical parquet: ids and L2-normalised float32 rows."""
    stats = {} if stats is None else stats
    ids = read_id_range(source, ID_COLUMNS[modality], start, stop)
    if len(ids) != stop - start:
        raise VlbenchError(f"{source}: rows {start}-{stop} requested but the file has fewer rows")
    chunks: list[np.ndarray] = []
    with tqdm(
        total=stop - start,
        desc=f"embed {modality}s {start}-{stop}",
        unit=modality,
        mininterval=5,
        file=sys.stderr,
    ) as progress:
        if modality == "image":
            for count, inputs in image_input_batches(model, source, start, stop, settings, stats):
                chunks.append(model.encode_images(inputs))
                progress.update(count)
        else:
            for texts in text_batches(source, start, stop, settings.batch_size):
                chunks.append(model.encode_texts(texts))
                progress.update(len(texts))
    matrix = np.concatenate(chunks)
    if len(matrix) != len(ids):
        raise VlbenchError(f"{source}: {len(matrix)} embeddings for {len(ids)} ids")
    return ids, matrix


def save_embeddings(
    ids: Sequence[str], embeddings: np.ndarray, npy_path: Path, ids_path: Path
) -> None:
    """Write the ids, then the matrix (the matrix last: its presence means complete)."""
    with atomic_path(ids_path) as tmp:
        pq.write_table(pa.table([list(ids)], schema=IDS_SCHEMA), tmp)
    with atomic_path(npy_path) as tmp, open(tmp, "wb") as handle:
        np.save(handle, embeddings, allow_pickle=False)


def embed_shard(
    model: EmbeddingModel,
    model_record: dict[str, Any],
    modality: str,
    source: Path,
    start: int,
    stop: int,
    settings: EmbedSettings,
    out_npy: Path,
    out_ids: Path,
    out_provenance: Path,
) -> dict[str, Any]:
    """Embed one shard and write matrix, ids and provenance atomically; return the provenance."""
    stats: dict[str, Any] = {}
    began = time.perf_counter()
    ids, matrix = embed_rows(model, modality, source, start, stop, settings, stats)
    seconds = time.perf_counter() - began
    stored = matrix.astype(STORAGE_DTYPES[settings.storage_dtype], copy=False)
    record = {
        **model_record,
        "modality": modality,
        "source": str(source),
        "rows": [start, stop],
        "seconds": round(seconds, 3),
        "items_per_second": round((stop - start) / seconds, 2) if seconds > 0 else None,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "settings": asdict(settings),
        **stats,
    }
    if modality == "text":
        # Reference tokenizers cut longer texts at the context length; say how many it touched.
        record["texts_at_context_limit"] = model.texts_at_context_limit
    write_text(out_provenance, json.dumps(record, indent=2, sort_keys=True) + "\n")
    save_embeddings(ids, stored, out_npy, out_ids)
    return record


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


def gather_shards(
    shard_npys: Sequence[str | Path],
    shard_ids: Sequence[str | Path],
    shard_provenance: Sequence[str | Path],
    out_npy: Path,
    out_ids: Path,
    out_provenance: Path,
    shard_timings: Sequence[str | Path] = (),
) -> int:
    """Concatenate shards in order into one matrix (streamed to disk) and ids; return rows."""
    if not shard_npys or not len(shard_npys) == len(shard_ids) == len(shard_provenance):
        raise VlbenchError(f"{out_npy}: gather needs one npy, ids and provenance file per shard")
    shapes = [np.load(path, mmap_mode="r", allow_pickle=False).shape for path in shard_npys]
    dtypes = {np.load(path, mmap_mode="r", allow_pickle=False).dtype for path in shard_npys}
    widths = {shape[1] for shape in shapes if len(shape) == 2}
    if len(widths) != 1 or len(dtypes) != 1 or any(len(shape) != 2 for shape in shapes):
        raise VlbenchError(
            f"{shard_npys[0]}: shards disagree in shape or dtype ({shapes}, {dtypes})"
        )
    rows = sum(shape[0] for shape in shapes)
    with atomic_path(out_ids) as tmp, pq.ParquetWriter(tmp, IDS_SCHEMA) as writer:
        for npy, ids_path, shape in zip(shard_npys, shard_ids, shapes, strict=True):
            ids = pq.read_table(ids_path)
            if ids.num_rows != shape[0]:
                raise VlbenchError(f"{ids_path}: {ids.num_rows} ids for {shape[0]} rows in {npy}")
            writer.write_table(ids.select(["id"]).cast(IDS_SCHEMA))
    with atomic_path(out_npy) as tmp:
        matrix = np.lib.format.open_memmap(
            tmp, mode="w+", dtype=dtypes.pop(), shape=(rows, widths.pop())
        )
        row = 0
        for npy in shard_npys:
            shard = np.load(npy, mmap_mode="r", allow_pickle=False)
            matrix[row : row + len(shard)] = shard
            row += len(shard)
        matrix.flush()
        del matrix
    records = [json.loads(Path(path).read_text(encoding="utf-8")) for path in shard_provenance]
    timings = [read_snakemake_benchmark(path) for path in shard_timings]
    write_text(out_provenance, json.dumps(merge_provenance(records, timings), indent=2) + "\n")
    return rows


PER_SHARD_KEYS = (
    "rows",
    "seconds",
    "items_per_second",
    "peak_rss_mb",
    "pixel_cache",
    "host",
    "device",
    "device_name",
    "cuda_visible_devices",
    "slurm_job_id",
)


def merge_provenance(
    records: Sequence[dict[str, Any]], timings: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    """One provenance record for a gathered matrix: shared fields once, per-shard fields listed."""
    shared = {key: value for key, value in records[0].items() if key not in PER_SHARD_KEYS}
    shards = []
    for index, record in enumerate(records):
        shard = {key: record.get(key) for key in PER_SHARD_KEYS}
        if index < len(timings) and timings[index]:
            shard["snakemake_benchmark"] = timings[index]
        shards.append(shard)
    seconds = sum(record.get("seconds") or 0 for record in records)
    rows = sum(stop - start for start, stop in (record["rows"] for record in records))
    return {
        **shared,
        "rows": rows,
        "seconds": round(seconds, 3),
        "items_per_second": round(rows / seconds, 2) if seconds > 0 else None,
        "shards": shards,
    }
