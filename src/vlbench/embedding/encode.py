"""One shard through one model: its ids and L2-normalised rows, and what the pass recorded."""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch
from tqdm import tqdm

from vlbench.data.canonical import ID_COLUMNS
from vlbench.embedding.batches import PixelPass, model_inputs
from vlbench.embedding.loader import read_column_range
from vlbench.embedding.models import BadEmbeddings, EmbeddingModel
from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_files import STORAGE_DTYPES, Shard
from vlbench.errors import VlbenchError

if TYPE_CHECKING:  # the job's loaded models (vlbench.embedding.waves, which loads them)
    from vlbench.embedding.waves import LoadedModel


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


class EncodedTexts(NamedTuple):
    """A shard's text rows, how many texts were distinct, and how many rows fill the whole
    context (their texts were, or may have been, truncated)."""

    matrix: np.ndarray
    distinct: int
    at_context_limit: int


def encode_distinct_texts(
    model: EmbeddingModel,
    texts: Sequence[str],
    batch_size: int,
    trim_padding: bool,
    progress: Callable[[int], object] = lambda count: None,
) -> EncodedTexts:
    """Encode each distinct text once (first-seen order, in batches) and give every copy that
    row: identical texts get identical embeddings whatever batches they fall in, so the exact
    tie policies hold for duplicated captions and prompts."""
    first: dict[str, int] = {}
    rows = np.fromiter(
        (first.setdefault(text, len(first)) for text in texts), dtype=np.int64, count=len(texts)
    )
    distinct = list(first)
    encoded, full = [], []
    for begin in range(0, len(distinct), batch_size):
        tokens = model.tokenize(distinct[begin : begin + batch_size])
        full.append(model.filling_context(tokens))
        try:
            encoded.append(model.encode_tokens(tokens, trim_padding))
        except BadEmbeddings as error:  # name the texts' first rows, not the distinct batch's
            first_rows = [texts.index(distinct[begin + row]) for row in error.rows]
            raise BadEmbeddings(first_rows, error.reason) from error
        progress(min(batch_size, len(distinct) - begin))
    progress(len(texts) - len(distinct))  # the copies, given their rows without encoding
    at_limit = int(np.concatenate(full)[rows].sum())
    return EncodedTexts(np.concatenate(encoded)[rows], len(distinct), at_limit)


class EmbeddedRows(NamedTuple):
    """A shard's ids, their L2-normalised float32 rows, and what the pass saw."""

    ids: list[str]
    matrix: np.ndarray
    stats: dict[str, Any]


def embed_rows(model: LoadedModel, shard: Shard, settings: EmbedSettings) -> EmbeddedRows:
    """Embed a shard's rows: ids, L2-normalised float32 rows, and where the pixels came from
    (images) or how many texts were distinct and fill the context (texts)."""
    stats: dict[str, Any] = {}
    source, start, stop = shard.source, shard.start, shard.stop
    ids = _shard_ids(shard)
    chunks: list[np.ndarray] = []
    try:
        with tqdm(
            total=stop - start,
            desc=f"embed {shard.modality}s {start}-{stop}",
            unit=shard.modality,
            mininterval=5,
            file=sys.stderr,
        ) as progress:
            if shard.modality == "image":
                pin = model.model.device.type == "cuda"
                with PixelPass(model.pipeline, shard, settings, pin) as pixels:
                    stats.update(pixels.stats)
                    for inputs in model_inputs(model.pipeline, pixels):
                        chunks.append(model.model.encode_images(inputs))
                        progress.update(len(inputs))
            else:
                texts = read_column_range(source, "text", start, stop)
                encoded = encode_distinct_texts(
                    model.model,
                    texts,
                    settings.batch_size,
                    settings.trim_text_padding,
                    progress.update,
                )
                stats["distinct_texts"] = encoded.distinct
                stats["texts_at_context_limit"] = encoded.at_context_limit
                chunks.append(encoded.matrix)
    except BadEmbeddings as error:
        done = sum(len(chunk) for chunk in chunks) if shard.modality == "image" else 0
        raise _named(error, model.model, shard, ids, done) from error
    return EmbeddedRows(ids, _checked_rows(np.concatenate(chunks), ids, shard), stats)


def _shard_ids(shard: Shard) -> list[str]:
    """The shard's row ids (every row of its range must be there)."""
    ids = read_column_range(shard.source, ID_COLUMNS[shard.modality], shard.start, shard.stop)
    if len(ids) != shard.stop - shard.start:
        raise VlbenchError(
            f"{shard.source}: rows {shard.start}-{shard.stop} requested but the file has fewer rows"
        )
    return ids


def _checked_rows(matrix: np.ndarray, ids: Sequence[str], shard: Shard) -> np.ndarray:
    if len(matrix) != len(ids):
        raise VlbenchError(f"{shard.source}: {len(matrix)} embeddings for {len(ids)} ids")
    return matrix


def _named(
    error: BadEmbeddings, model: EmbeddingModel, shard: Shard, ids: Sequence[str], offset: int
) -> VlbenchError:
    """The error of a batch with rows that cannot be normalised, naming model, file and items."""
    shown = ", ".join(
        f"{ids[offset + row]!r} (row {shard.start + offset + row})" for row in error.rows[:3]
    )
    more = f" and {len(error.rows) - 3} more" if len(error.rows) > 3 else ""
    label = model.source.get("name") or model.source.get("adapter", "?")
    return VlbenchError(
        f"model {label}: {shard.source}: {shard.modality} {shown}{more}: {error.reason}"
    )


def embed_shard(
    model: LoadedModel, shard: Shard, settings: EmbedSettings
) -> tuple[list[str], np.ndarray, dict[str, Any]]:
    """Embed a shard: ids, the matrix in its storage dtype, and its provenance record."""
    began = time.perf_counter()
    ids, matrix, stats = embed_rows(model, shard, settings)
    seconds = time.perf_counter() - began
    record = _shard_record(model, shard, settings, seconds, stats)
    return ids, matrix.astype(STORAGE_DTYPES[settings.storage_dtype], copy=False), record


def embed_images_together(
    models: Sequence[LoadedModel],
    shard: Shard,
    settings: EmbedSettings,
    opened: PixelPass | None = None,
) -> list[tuple[list[str], np.ndarray, dict[str, Any]]]:
    """`embed_shard` of one image shard for one or more models whose pipelines share their
    geometric steps, in one pass over the shard's pixels (`opened`, when the job opened it
    ahead): each batch is decoded (or read from the pixel cache) once and goes through every
    model, each with its own tensor steps. The batches, and so every model's numbers, are those
    `embed_shard` gives each model alone."""
    began = time.perf_counter()
    ids = _shard_ids(shard)
    chunks: list[list[np.ndarray]] = [[] for _ in models]
    buffers: list[torch.Tensor | None] = [None for _ in models]
    pin = any(model.model.device.type == "cuda" for model in models)
    done = 0
    with (
        opened or PixelPass(models[0].pipeline, shard, settings, pin) as pixel_pass,
        tqdm(
            total=shard.stop - shard.start,
            desc=f"embed images {shard.start}-{shard.stop} ({len(models)} models)",
            unit="image",
            mininterval=5,
            file=sys.stderr,
        ) as progress,
    ):
        for kind, batch in pixel_pass:
            if kind != "pixels":
                raise ValueError("models embedded together need a cacheable geometry")
            for number, model in enumerate(models):
                buffers[number] = model.pipeline.to_model_input(batch, reuse=buffers[number])
                try:
                    chunks[number].append(model.model.encode_images(buffers[number]))
                except BadEmbeddings as error:
                    raise _named(error, model.model, shard, ids, done) from error
            done += len(batch)
            progress.update(len(batch))
    seconds = time.perf_counter() - began
    stats = dict(pixel_pass.stats)
    if len(models) > 1:
        stats["embedded_with"] = [model.record.get("model", {}).get("name") for model in models]
    out = []
    for model, model_chunks in zip(models, chunks, strict=True):
        matrix = _checked_rows(np.concatenate(model_chunks), ids, shard)
        record = _shard_record(model, shard, settings, seconds, stats)
        out.append((ids, matrix.astype(STORAGE_DTYPES[settings.storage_dtype], copy=False), record))
    return out


def _shard_record(
    model: LoadedModel,
    shard: Shard,
    settings: EmbedSettings,
    seconds: float,
    stats: dict[str, Any],
) -> dict[str, Any]:
    """A stored shard's provenance: the model, the rows, the pass's speed and what it saw
    (a text shard's own count of texts at the context limit among them)."""
    rows = shard.stop - shard.start
    record = {
        **model.record,
        "modality": shard.modality,
        "source": str(shard.source),
        "rows": [shard.start, shard.stop],
        "seconds": round(seconds, 3),
        "items_per_second": round(rows / seconds, 2) if seconds > 0 else None,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "settings": asdict(settings),
        **stats,
    }
    if shard.modality == "text":
        record["text_padding_trimmed"] = model.model.trims_text_padding(settings.trim_text_padding)
    return record
