"""Embed shards (contiguous row ranges) of a benchmark's modalities and write them (`shard_files`).

A workflow job embeds shard k of every modality that has one, through one loaded model: shard
jobs are independent (any number run at once on different GPUs), and a shard whose stored content
key still matches is reused, so a rerun (after a kill, or after only the texts changed)
recomputes only what is missing or stale.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from vlbench.atomic import write_text
from vlbench.config import RUN_TIME_KEYS, schema_defaults
from vlbench.data.canonical import ID_COLUMNS
from vlbench.data.decode_policy import read_policy
from vlbench.embedding.image_transform import ImagePipeline
from vlbench.embedding.loader import (
    ImageChunks,
    plan_chunks,
    read_column_range,
    stream_image_chunks,
)
from vlbench.embedding.models import BadEmbeddings, EmbeddingModel
from vlbench.embedding.pixel_cache import PixelCache, PixelShardWriter
from vlbench.embedding.shard_files import (
    STORAGE_DTYPES,
    embedding_content_key,
    save_embeddings,
    shard_file_paths,
    stored_shard_record,
)
from vlbench.errors import VlbenchError
from vlbench.paths import PIXEL_CACHE_DIR


@dataclass(frozen=True)
class EmbedSettings:
    """How a shard is embedded: the config's `embedding` section plus the benchmark's name.

    The defaults live in the config schema only; build settings with `from_config`.
    """

    benchmark: str
    batch_size: int
    threads: int
    num_workers: int | None
    storage_dtype: str
    pixel_cache: bool
    draft_decode: bool
    trim_text_padding: bool
    pixel_cache_dir: str = PIXEL_CACHE_DIR
    # Content digest of the shard's rows (from the shard plan): part of the pixel cache's key.
    rows_digest: str = ""

    @property
    def decode_workers(self) -> int:
        """DataLoader worker processes: `num_workers`, or one per thread of the job when null."""
        return self.threads if self.num_workers is None else self.num_workers

    @classmethod
    def from_config(
        cls, benchmark: str, embedding: Mapping[str, Any] | None = None, **extra: Any
    ) -> EmbedSettings:
        """Settings from an `embedding` config section (missing keys: the schema's defaults)."""
        section = {**schema_defaults("embedding"), **(embedding or {}), **extra}
        known = {key: value for key, value in section.items() if key in cls.__dataclass_fields__}
        return cls(benchmark=benchmark, **known)


def result_settings(settings: EmbedSettings) -> dict[str, Any]:
    """The settings that can change an embedding's numbers (not speed knobs, not paths)."""
    speed = (*RUN_TIME_KEYS["embedding"], "benchmark", "pixel_cache_dir", "rows_digest")
    return {key: value for key, value in asdict(settings).items() if key not in speed}


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


def image_input_batches(
    model: EmbeddingModel,
    source: Path,
    start: int,
    stop: int,
    settings: EmbedSettings,
    stats: dict[str, Any],
) -> Iterator[tuple[int, torch.Tensor]]:
    """Model-ready float32 batches of rows [start, stop): from the pixel cache or by decoding.

    On a cache miss the job takes the shard's fill lock first: if another job is decoding the
    same rows, this one waits and reads them from the cache instead of decoding them again.
    """
    pipeline = ImagePipeline.from_model(model)
    stats["pixel_geometry"] = pipeline.summary
    stats["decode_policy"] = read_policy(source).as_dict()
    if not (settings.pixel_cache and pipeline.cacheable):
        stats["pixel_cache"] = f"off: {pipeline.reason}" if settings.pixel_cache else "off"
        yield from _decoded_batches(model, pipeline, source, start, stop, settings, None)
        return
    key = pipeline.geometry_key(settings.draft_decode)
    stats["geometry_key"] = key
    cache = PixelCache(
        settings.pixel_cache_dir, settings.benchmark, key, source, settings.rows_digest
    )
    cached = cache.load(start, stop)
    if cached is not None:
        stats["pixel_cache"] = f"hit: {cache.shard_path(start, stop)}"
        yield from _cached_model_inputs(pipeline, cached, settings.batch_size)
        return
    with cache.filling(start, stop) as waited:
        cached = cache.load(start, stop)
        if cached is not None:
            stats["pixel_cache"] = (
                f"hit after waiting {waited:.1f} s for another job: {cache.shard_path(start, stop)}"
            )
            yield from _cached_model_inputs(pipeline, cached, settings.batch_size)
            return
        stats["pixel_cache"] = f"miss: wrote {cache.shard_path(start, stop)}"
        yield from _decoded_batches(model, pipeline, source, start, stop, settings, cache)


def _cached_model_inputs(
    pipeline: ImagePipeline, pixels: np.ndarray, batch_size: int
) -> Iterator[tuple[int, torch.Tensor]]:
    for begin in range(0, len(pixels), batch_size):
        batch = torch.from_numpy(np.array(pixels[begin : begin + batch_size]))
        yield len(batch), pipeline.to_model_input(batch)


def _decoded_batches(
    model: EmbeddingModel,
    pipeline: ImagePipeline,
    source: Path,
    start: int,
    stop: int,
    settings: EmbedSettings,
    cache: PixelCache | None,
) -> Iterator[tuple[int, torch.Tensor]]:
    """Decode rows [start, stop) (filling `cache`'s shard when given) into model inputs."""
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
            stream_image_chunks(dataset, settings.decode_workers, pin), settings.batch_size
        ):
            if "inputs" in item:
                yield len(item["inputs"]), item["inputs"]
                continue
            if writer is not None:
                writer.append(item["pixels"].numpy())
            yield len(item["pixels"]), pipeline.to_model_input(item["pixels"])
        success = True
    finally:
        if writer is not None and cache is not None and writer.close(success):
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


def encode_distinct_texts(
    model: EmbeddingModel,
    texts: Sequence[str],
    batch_size: int,
    trim_padding: bool,
    progress: Callable[[int], object] = lambda count: None,
) -> tuple[np.ndarray, int]:
    """Encode each distinct text once (first-seen order, in batches) and give every copy that
    row: identical texts get identical embeddings whatever batches they fall in, so the exact
    tie policies hold for duplicated captions and prompts. Returns the rows and the count of
    distinct texts."""
    first: dict[str, int] = {}
    rows = np.fromiter(
        (first.setdefault(text, len(first)) for text in texts), dtype=np.int64, count=len(texts)
    )
    distinct = list(first)
    encoded = []
    for begin in range(0, len(distinct), batch_size):
        try:
            encoded.append(model.encode_texts(distinct[begin : begin + batch_size], trim_padding))
        except BadEmbeddings as error:  # name the texts' first rows, not the distinct batch's
            first_rows = [texts.index(distinct[begin + row]) for row in error.rows]
            raise BadEmbeddings(first_rows, error.reason) from error
        progress(min(batch_size, len(distinct) - begin))
    progress(len(texts) - len(distinct))  # the copies, given their rows without encoding
    return np.concatenate(encoded)[rows], len(distinct)


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
    ids = read_column_range(source, ID_COLUMNS[modality], start, stop)
    if len(ids) != stop - start:
        raise VlbenchError(f"{source}: rows {start}-{stop} requested but the file has fewer rows")
    chunks: list[np.ndarray] = []
    try:
        with tqdm(
            total=stop - start,
            desc=f"embed {modality}s {start}-{stop}",
            unit=modality,
            mininterval=5,
            file=sys.stderr,
        ) as progress:
            if modality == "image":
                for count, inputs in image_input_batches(
                    model, source, start, stop, settings, stats
                ):
                    chunks.append(model.encode_images(inputs))
                    progress.update(count)
            else:
                texts = read_column_range(source, "text", start, stop)
                matrix, distinct = encode_distinct_texts(
                    model, texts, settings.batch_size, settings.trim_text_padding, progress.update
                )
                stats["distinct_texts"] = distinct
                chunks.append(matrix)
    except BadEmbeddings as error:
        done = sum(len(chunk) for chunk in chunks) if modality == "image" else 0
        raise _named(error, model, modality, source, ids, start, done) from error
    matrix = np.concatenate(chunks)
    if len(matrix) != len(ids):
        raise VlbenchError(f"{source}: {len(matrix)} embeddings for {len(ids)} ids")
    return ids, matrix


def _named(
    error: BadEmbeddings,
    model: EmbeddingModel,
    modality: str,
    source: Path,
    ids: Sequence[str],
    start: int,
    offset: int,
) -> VlbenchError:
    """The error of a batch with rows that cannot be normalised, naming model, file and items."""
    shown = ", ".join(
        f"{ids[offset + row]!r} (row {start + offset + row})" for row in error.rows[:3]
    )
    more = f" and {len(error.rows) - 3} more" if len(error.rows) > 3 else ""
    label = model.source.get("name") or model.source.get("adapter", "?")
    return VlbenchError(f"model {label}: {source}: {modality} {shown}{more}: {error.reason}")


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
    content_key: str | None = None,
) -> dict[str, Any]:
    """Embed one shard and write matrix, ids and provenance atomically; return the provenance.

    The provenance goes last (and the old one is removed first): a shard is complete, with
    the content key it records, only once its provenance is there.
    """
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
        "content_key": content_key,
        "seconds": round(seconds, 3),
        "items_per_second": round((stop - start) / seconds, 2) if seconds > 0 else None,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "settings": asdict(settings),
        **stats,
    }
    if modality == "text":
        # Reference tokenizers cut longer texts at the context length; say how many it touched.
        record["texts_at_context_limit"] = model.texts_at_context_limit
        record["text_padding_trimmed"] = model.trims_text_padding(settings.trim_text_padding)
    Path(out_provenance).unlink(missing_ok=True)
    save_embeddings(ids, stored, out_npy, out_ids)
    write_text(out_provenance, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


@dataclass(frozen=True)
class ShardWork:
    """One modality's shard of a job: which rows of which prepared parquet, and their digest."""

    modality: str
    source: Path
    start: int
    stop: int
    rows_digest: str


# Texts first: while another job still decodes a shared pixel-cache shard, this job's text
# forward overlaps that decode instead of waiting behind it.
MODALITY_ORDER = ("text", "image")


def embed_shard_job(
    load: Callable[[], tuple[EmbeddingModel, dict[str, Any]]],
    work: Sequence[ShardWork],
    settings: EmbedSettings,
    identity: dict[str, Any],
    embeddings_dir: Path,
    out_record: Path,
) -> dict[str, Any]:
    """Embed every shard in `work` that is not stored under its content key, then write the
    job's record (per modality: rows, content key, reused or embedded, and the provenance).

    `load` returns the model and its provenance record; it is called only if a shard needs
    embedding, so a job whose shards are all stored loads no model.
    """
    loaded: tuple[EmbeddingModel, dict[str, Any]] | None = None
    summary: dict[str, Any] = {}
    for item in sorted(work, key=lambda item: MODALITY_ORDER.index(item.modality)):
        key = embedding_content_key(item.rows_digest, identity)
        paths = shard_file_paths(embeddings_dir, item.modality, out_record.stem)
        record = stored_shard_record(paths, key)
        reused = record is not None
        if record is None:
            loaded = loaded or load()
            record = embed_shard(
                loaded[0],
                loaded[1],
                item.modality,
                item.source,
                item.start,
                item.stop,
                replace(settings, rows_digest=item.rows_digest),
                paths["embeddings"],
                paths["ids"],
                paths["provenance"],
                content_key=key,
            )
        summary[item.modality] = {
            "rows": [item.start, item.stop],
            "content_key": key,
            "reused": reused,
            "provenance": record,
        }
    job = {"shard": out_record.stem, "modalities": summary}
    write_text(out_record, json.dumps(job, indent=2, sort_keys=True) + "\n")
    return job
