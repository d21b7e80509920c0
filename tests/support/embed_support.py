"""Small models and canonical parquet files for the embedding-engine tests."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import open_clip
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from PIL import Image

from vlbench.data.canonical import IMAGES_SCHEMA, TEXTS_SCHEMA
from vlbench.data.synthetic import IMAGE_KINDS, draw_image
from vlbench.embedding.models import EmbeddingModel, register_model_config

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
    alone, together = embedding_job.embed_shard, embedding_job.embed_images_together

    def counting(model, record, shard, settings):
        embedded.append((shard.start, shard.stop))
        return alone(model, record, shard, settings)

    def counting_together(loaded, pipelines, shard, settings, opened=None):
        embedded.extend([(shard.start, shard.stop)] * len(loaded))
        return together(loaded, pipelines, shard, settings, opened)

    monkeypatch.setattr(embedding_job, "embed_shard", counting)
    monkeypatch.setattr(embedding_job, "embed_images_together", counting_together)
    return embedded
