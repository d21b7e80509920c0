"""Small models and canonical parquet files for the embedding-engine tests."""

from __future__ import annotations

import io
from dataclasses import asdict
from pathlib import Path

import numpy as np
import open_clip
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from PIL import Image

from vlbench.data.canonical import IMAGES_SCHEMA, TEXTS_SCHEMA
from vlbench.data.synthetic import IMAGE_KINDS, draw_image
from vlbench.embedding import encode
from vlbench.embedding.encode import EmbeddedRows
from vlbench.embedding.identity import embedding_identity
from vlbench.embedding.matrix_files import MatrixFiles
from vlbench.embedding.models import EmbeddingModel, register_model_config
from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_files import Shard, ShardStore, gather_shards, plan_shards
from vlbench.embedding.waves import LoadedModel

TINY_CONFIG = Path(__file__).resolve().parents[2] / "config" / "models" / "vlbench-tiny.json"


def tiny_model(
    seed: int = 0,
    size: int | tuple[int, int] = 64,
    resize_mode: str = "shortest",
    interpolation: str = "bicubic",
    mean: tuple[float, ...] | None = None,
    std: tuple[float, ...] | None = None,
) -> EmbeddingModel:
    """The repository's tiny architecture with seeded random weights and a chosen transform."""
    register_model_config("vlbench-tiny", TINY_CONFIG)
    torch.manual_seed(seed)
    model = open_clip.create_model("vlbench-tiny", pretrained=None, device="cpu").eval()
    preprocess = open_clip.image_transform(
        size,
        is_train=False,
        mean=mean,
        std=std,
        resize_mode=resize_mode,
        interpolation=interpolation,
    )
    tokenizer = open_clip.get_tokenizer("vlbench-tiny")
    return EmbeddingModel(model, preprocess, tokenizer, torch.device("cpu"), "fp32")


def photo_jpeg(rng: np.random.Generator, width: int, height: int, quality: int = 90) -> bytes:
    """A photo-like JPEG: smooth colour fields, shapes and sensor-like noise."""
    coarse = rng.integers(0, 256, (max(height // 40, 2), max(width // 40, 2), 3), dtype=np.uint8)
    base = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC), np.int16)
    noisy = base + rng.normal(0, 6, base.shape).astype(np.int16)
    image = Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def write_images(path: Path, rows: int, row_group_size: int, seed: int = 0) -> list[bytes]:
    """A canonical images.parquet mixing every mode/format the hub data has plus large JPEGs."""
    rng = np.random.default_rng(seed)
    images = []
    for row in range(rows):
        if row % 4 == 3:
            images.append(photo_jpeg(rng, 480, 390))
        else:
            mode, fmt = IMAGE_KINDS[row % len(IMAGE_KINDS)]
            images.append(draw_image(rng, mode, fmt)[0])
    ids = [f"img-{row:04d}" for row in range(rows)]
    table = pa.table([ids, images, pa.nulls(rows, pa.string())], schema=IMAGES_SCHEMA)
    pq.write_table(table, path, row_group_size=row_group_size)
    return images


def write_texts(path: Path, rows: int, row_group_size: int) -> list[str]:
    """A canonical texts.parquet of distinct captions."""
    texts = [f"caption number {row} of a stained section" for row in range(rows)]
    ids = [f"txt-{row:04d}" for row in range(rows)]
    table = pa.table([ids, texts, pa.nulls(rows, pa.string())], schema=TEXTS_SCHEMA)
    pq.write_table(table, path, row_group_size=row_group_size)
    return texts


def reference_image_embeddings(
    model: EmbeddingModel, images: list[bytes], batch_size: int
) -> np.ndarray:
    """The reference path: PIL open -> convert('RGB') -> the model's preprocess, per image."""
    chunks = []
    for begin in range(0, len(images), batch_size):
        pixels = torch.stack(
            [
                model.preprocess(Image.open(io.BytesIO(data)).convert("RGB"))
                for data in images[begin : begin + batch_size]
            ]
        )
        chunks.append(model.encode_images(pixels))
    return np.concatenate(chunks)


def count_embedded_shards(monkeypatch) -> list[tuple[int, int]]:
    """Record the (start, stop) rows of every shard an embedding job embeds from now on, once
    per model (the stored shards it reuses are not embedded)."""
    from vlbench.embedding import job as embedding_job

    embedded: list[tuple[int, int]] = []
    alone, together = encode.embed_shard, encode.embed_images_together

    def counting(model, shard, settings):
        embedded.append((shard.start, shard.stop))
        return alone(model, shard, settings)

    def counting_together(models, shard, settings, opened=None):
        embedded.extend([(shard.start, shard.stop)] * len(models))
        return together(models, shard, settings, opened)

    for module in (embedding_job, encode):  # the job's names, and those the helper below calls
        monkeypatch.setattr(module, "embed_shard", counting)
        monkeypatch.setattr(module, "embed_images_together", counting_together)
    return embedded


def embed_with_loaded_model(
    model: EmbeddingModel,
    spec: dict,
    source: Path,
    modality: str,
    settings: EmbedSettings,
    out_dir: Path,
    pixel_folder: Path | None = None,
) -> Path:
    """One modality through a model loaded already, with the embed job's files and resume
    rule: shards stored under `out_dir/shards/<modality>/` (reused while their content key
    matches), gathered into `out_dir/<modality>.npy` (returned); decoded pixels cached in
    `pixel_folder` (None: not cached)."""
    out = MatrixFiles.at(Path(out_dir) / modality)
    identity = embedding_identity(spec, "", asdict(settings))
    loaded = LoadedModel.of(model, {"model": spec}, settings)
    store = ShardStore(Path(out_dir) / "shards" / modality, identity)
    folder = pixel_folder if modality == "image" else None
    stems, records = [], []
    for shard in plan_shards(modality, Path(source), settings.shard_size, folder):
        record = store.stored(shard)
        if record is None:
            record = store.save(shard, *encode.embed_shard(loaded, shard, settings))
        stems.append(store.files(shard))
        records.append(record)
    gather_shards(stems, records, out)
    return out.embeddings


def embed_rows(model: EmbeddingModel, shard: Shard, settings: EmbedSettings) -> EmbeddedRows:
    """`encode.embed_rows` of a bare model (its pipeline and pass key worked out here)."""
    return encode.embed_rows(LoadedModel.of(model, {}, settings), shard, settings)
