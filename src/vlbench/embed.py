"""Turn a prepared benchmark's images or texts into an L2-normalised float32 embedding matrix."""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from PIL import Image
from tqdm import tqdm

from vlbench.atomic import atomic_path, write_text
from vlbench.canonical import ID_COLUMNS
from vlbench.errors import VlbenchError
from vlbench.models import EmbeddingModel

IDS_SCHEMA = pa.schema([("id", pa.string())])


def decode_image(data: bytes, image_id: str, source: Path) -> Image.Image:
    """Decode encoded bytes to an RGB PIL image, as the reference scripts do (`.convert('RGB')`)."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.convert("RGB")
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise VlbenchError(f"{source}: image {image_id!r} cannot be decoded ({exc})") from exc


def _batches(path: Path, columns: list[str], batch_size: int) -> Iterator[pa.RecordBatch]:
    yield from pq.ParquetFile(path).iter_batches(batch_size=batch_size, columns=columns)


def embed_modality(
    model: EmbeddingModel, modality: str, source: Path, batch_size: int
) -> tuple[list[str], np.ndarray]:
    """Embed every row of a canonical images/texts parquet, in file order, batch by batch."""
    id_column = ID_COLUMNS[modality]
    value_column = "image" if modality == "image" else "text"
    total = pq.ParquetFile(source).metadata.num_rows
    ids: list[str] = []
    chunks: list[np.ndarray] = []
    with tqdm(total=total, desc=f"embed {modality}s", unit=modality, mininterval=5) as progress:
        for batch in _batches(source, [id_column, value_column], batch_size):
            batch_ids = batch.column(id_column).to_pylist()
            values = batch.column(value_column).to_pylist()
            if modality == "image":
                pixels = torch.stack(
                    [
                        model.preprocess(decode_image(data, image_id, source))
                        for image_id, data in zip(batch_ids, values, strict=True)
                    ]
                )
                chunks.append(model.encode_images(pixels))
            else:
                chunks.append(model.encode_texts(values))
            ids.extend(batch_ids)
            progress.update(len(batch_ids))
    if not ids:
        raise VlbenchError(f"{source}: no rows to embed")
    return ids, np.concatenate(chunks)


def save_embeddings(ids: list[str], embeddings: np.ndarray, npy_path: Path, ids_path: Path) -> None:
    """Write the matrix and its ids, each atomically."""
    with atomic_path(ids_path) as tmp:
        pq.write_table(pa.table([ids], schema=IDS_SCHEMA), tmp)
    with atomic_path(npy_path) as tmp, open(tmp, "wb") as handle:
        np.save(handle, embeddings, allow_pickle=False)


def load_embeddings(npy_path: str | Path, ids_path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read a matrix and its ids; check they agree in length."""
    matrix = np.load(npy_path, allow_pickle=False)
    ids = np.asarray(pq.read_table(ids_path).column("id").to_pylist(), dtype=object)
    if matrix.ndim != 2 or matrix.shape[0] != len(ids):
        raise VlbenchError(
            f"{npy_path}: {matrix.shape} rows do not match the {len(ids)} ids in {ids_path}"
        )
    return matrix, ids


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def provenance(
    model_spec: dict[str, Any], model: EmbeddingModel, batch_size: int, seconds: float, rows: int
) -> dict[str, Any]:
    """What produced an embedding matrix: weights, libraries, device, precision, timing."""
    import open_clip

    pretrained = model_spec.get("pretrained")
    weights = file_sha256(pretrained) if pretrained and Path(pretrained).is_file() else None
    return {
        "model": model_spec,
        "weights_sha256": weights,
        "device": str(model.device),
        "device_name": torch.cuda.get_device_name(model.device)
        if model.device.type == "cuda"
        else platform.processor() or platform.machine(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "host": platform.node(),
        "precision": model.precision,
        "batch_size": batch_size,
        "rows": rows,
        "seconds": round(seconds, 3),
        "items_per_second": round(rows / seconds, 2) if seconds > 0 else None,
        "versions": {
            "torch": torch.__version__,
            "open_clip": open_clip.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
        },
    }


def run_embedding(
    model: EmbeddingModel,
    model_spec: dict[str, Any],
    modality: str,
    source: Path,
    batch_size: int,
    out_npy: Path,
    out_ids: Path,
    out_provenance: Path,
) -> None:
    """Embed, save, and record provenance for one (model, benchmark, modality)."""
    start = time.perf_counter()
    ids, embeddings = embed_modality(model, modality, source, batch_size)
    seconds = time.perf_counter() - start
    save_embeddings(ids, embeddings, out_npy, out_ids)
    record = provenance(model_spec, model, batch_size, seconds, len(ids))
    write_text(out_provenance, json.dumps(record, indent=2, sort_keys=True) + "\n")
