"""Stream a canonical images parquet, row group by row group, through a torch DataLoader.

Each DataLoader item is one chunk of at most `batch_size` rows lying inside one row group, so a
worker holds at most one row group's encoded bytes and one chunk of pixels at a time, whatever
the size of the dataset.
"""

from __future__ import annotations

import io
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from PIL import ExifTags, Image, ImageOps

from vlbench.data.canonical import open_parquet
from vlbench.data.decode_policy import LEGACY, DecodePolicy, read_policy
from vlbench.embedding.image_transform import ImagePipeline
from vlbench.errors import VlbenchError


@dataclass(frozen=True)
class Chunk:
    """Rows [offset, offset + length) of row group `row_group`."""

    row_group: int
    offset: int
    length: int


def plan_chunks(source: str | Path, start: int, stop: int, batch_size: int) -> list[Chunk]:
    """Cut global rows [start, stop) into chunks of at most `batch_size` rows within row groups."""
    metadata = pq.ParquetFile(source).metadata
    chunks = []
    first = 0
    for group in range(metadata.num_row_groups):
        rows = metadata.row_group(group).num_rows
        low, high = max(start, first), min(stop, first + rows)
        for begin in range(low, high, batch_size):
            chunks.append(Chunk(group, begin - first, min(batch_size, high - begin)))
        first += rows
    return chunks


def read_column_range(source: str | Path, column: str, start: int, stop: int) -> list[Any]:
    """One column's values of global rows [start, stop) (ids, captions), reading only the row
    groups that hold them."""
    parquet = pq.ParquetFile(source)
    values: list[Any] = []
    first = 0
    for group in range(parquet.metadata.num_row_groups):
        rows = parquet.metadata.row_group(group).num_rows
        low, high = max(start, first), min(stop, first + rows)
        if low < high:
            chunk = parquet.read_row_group(group, columns=[column]).column(column)
            values.extend(chunk.slice(low - first, high - low).to_pylist())
        first += rows
    return values


def decode_image(
    data: bytes,
    image_id: str,
    source: Path,
    draft_size: tuple[int, int] | None = None,
    policy: DecodePolicy = LEGACY,
) -> Image.Image:
    """Decode encoded bytes to a PIL image exactly as the benchmark's reference sees it.

    With `policy.exif` the EXIF orientation is applied when the tag is present (as the
    `datasets` Image feature does); the image is converted to RGB here when the policy converts
    its mode first, else it keeps its original mode for the preprocess's geometric steps. With
    `draft_size`, a JPEG is decoded at a reduced scale (1/2, 1/4 or 1/8) that keeps both sides
    at least that large: faster, and not bitwise equal to a full decode.
    """
    try:
        with Image.open(io.BytesIO(data)) as image:
            if draft_size is not None and image.format == "JPEG":
                image.draft(None, draft_size)
            image.load()
            decoded = image
            if policy.exif and image.getexif().get(ExifTags.Base.Orientation) is not None:
                decoded = ImageOps.exif_transpose(image)
            if policy.converts_first(decoded.mode):
                return decoded.convert("RGB")
            # Closing the file releases the pixels of `image`: keep a copy of its own.
            return decoded if decoded is not image else image.copy()
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise VlbenchError(
            f"{source}: image {image_id!r} cannot be decoded ({exc}); the benchmark's "
            "image_policy: skip leaves out the images that do not decode"
        ) from exc


class ImageChunks(torch.utils.data.Dataset):
    """Decoded chunks of an images parquet: uint8 pixels when the pipeline is cacheable.

    An item is a dict with `ids`, and `pixels` (uint8, N x H x W x 3: the geometric steps only)
    or `inputs` (float32, N x 3 x H x W: the whole preprocess), or `error` (a one-line message).
    """

    def __init__(
        self,
        source: str | Path,
        chunks: list[Chunk],
        pipeline: ImagePipeline,
        draft: bool = False,
        id_column: str = "image_id",
        policy: DecodePolicy | None = None,
    ) -> None:
        self.source = Path(source)
        # The policy the images file was prepared with (LEGACY for files without one).
        self.policy = read_policy(self.source) if policy is None else policy
        self.chunks = chunks
        self.pipeline = pipeline
        self.draft_size = pipeline.draft_size() if draft else None
        self.id_column = id_column
        self._parquet: pq.ParquetFile | None = None
        self._group: tuple[int, pa.Table] | None = None

    def __len__(self) -> int:
        return len(self.chunks)

    def _row_group(self, group: int) -> pa.Table:
        if self._group is None or self._group[0] != group:
            if self._parquet is None:
                self._parquet = open_parquet(self.source)
            self._group = None
            table = self._parquet.read_row_group(group, columns=[self.id_column, "image"])
            self._group = (group, table)
        return self._group[1]

    def __getitem__(self, index: int) -> dict[str, Any]:
        chunk = self.chunks[index]
        table = self._row_group(chunk.row_group).slice(chunk.offset, chunk.length)
        ids = table.column(self.id_column).to_pylist()
        # One full-size decoded image at a time: memory does not grow with the chunk size.
        decoded = (
            decode_image(data, image_id, self.source, self.draft_size, self.policy)
            for image_id, data in zip(ids, table.column("image").to_pylist(), strict=True)
        )
        try:
            if self.pipeline.cacheable:
                pixels = np.stack([self.pipeline.to_pixels(image) for image in decoded])
                return {"ids": ids, "pixels": torch.from_numpy(pixels)}
            inputs = torch.stack([self.pipeline.preprocess(image) for image in decoded])
            return {"ids": ids, "inputs": inputs}
        except VlbenchError as error:
            return {"ids": ids, "error": str(error)}
        except (ValueError, RuntimeError) as error:
            message = f"{self.source}: rows of row group {chunk.row_group} cannot be preprocessed"
            return {"ids": ids, "error": f"{message} ({error})"}


def stream_image_chunks(
    dataset: ImageChunks, num_workers: int, pin_memory: bool
) -> Generator[dict[str, Any], None, None]:
    """Yield the dataset's chunks in order, decoded by `num_workers` worker processes."""
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=None,
        shuffle=False,
        num_workers=num_workers,
        pin_memory=pin_memory,
        prefetch_factor=2 if num_workers > 0 else None,
        persistent_workers=False,
    )
    for item in loader:
        if "error" in item:
            raise VlbenchError(item["error"])
        yield item
