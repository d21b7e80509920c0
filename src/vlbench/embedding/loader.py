"""Stream a canonical images parquet, row group by row group, through a torch DataLoader.

Each DataLoader item is one chunk of at most `batch_size` rows lying inside one row group. A
worker reads a row group's encoded bytes in small batches, in order (`RowGroupCursor`), so it holds
one chunk's bytes and one chunk's pixels at a time whatever the size of the dataset, and the
memory of one batch is reused for the next instead of a fresh buffer per row group.
"""

from __future__ import annotations

import io
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from PIL import ExifTags, Image, ImageOps

from vlbench.data.canonical import IMAGE_BATCH_ROWS, open_parquet
from vlbench.data.decode_policy import LEGACY, DecodePolicy, read_policy
from vlbench.embedding.image_transform import ImagePipeline
from vlbench.errors import VlbenchError

# Batches each decode worker decodes ahead: enough to keep decoding while the job loads the
# other models of a wave and embeds their texts (a few seconds) before it takes the first one.
PREFETCH_BATCHES = 4


def decode_chunk_rows(batch_size: int, workers: int) -> int:
    """Rows per decode chunk: a batch split across the workers, so the first batch is ready
    once each worker has decoded its share. With whole batches per worker, 14 workers and
    batches of 256 kept the GPU waiting about 8 s for the first (one worker decoding 256
    images alone; benchmarks/RESULTS.md, the first GPU run)."""
    return max(1, -(-batch_size // max(workers, 1)))


@dataclass(frozen=True)
class Chunk:
    """Rows [offset, offset + length) of row group `row_group`."""

    row_group: int
    offset: int
    length: int


def plan_chunks(source: str | Path, start: int, stop: int, chunk_rows: int) -> list[Chunk]:
    """Cut global rows [start, stop) into chunks of at most `chunk_rows` rows within row groups."""
    metadata = pq.ParquetFile(source).metadata
    chunks = []
    first = 0
    for group in range(metadata.num_row_groups):
        rows = metadata.row_group(group).num_rows
        low, high = max(start, first), min(stop, first + rows)
        for begin in range(low, high, chunk_rows):
            chunks.append(Chunk(group, begin - first, min(chunk_rows, high - begin)))
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
        # Not closed: the file is an in-memory buffer, and closing an image drops its pixels.
        image = Image.open(io.BytesIO(data))
        if draft_size is not None and image.format == "JPEG":
            image.draft(None, draft_size)
        image.load()
        if policy.exif and image.getexif().get(ExifTags.Base.Orientation) is not None:
            image = ImageOps.exif_transpose(image)
        # convert("RGB") of an RGB image is a copy of the same pixels: skipped (a full-size
        # copy per image, about 1.5 ms of each image's 35 ms).
        if image.mode != "RGB" and policy.converts_first(image.mode):
            return image.convert("RGB")
        return image
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
        self._cursor: RowGroupCursor | None = None

    def __len__(self) -> int:
        return len(self.chunks)

    def _rows(self, chunk: Chunk) -> pa.Table:
        """The chunk's ids and encoded images (read in order from where the last chunk ended,
        or from the start of its row group)."""
        columns = [self.id_column, "image"]
        if self._cursor is None or not self._cursor.can_reach(chunk):
            self._cursor = RowGroupCursor(self.source, chunk.row_group, columns)
        return self._cursor.take(chunk)

    def __getitem__(self, index: int) -> dict[str, Any]:
        chunk = self.chunks[index]
        table = self._rows(chunk)
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


class RowGroupCursor:
    """Rows of one row group read forward in batches of IMAGE_BATCH_ROWS rows.

    Not `read_row_group`: that decodes the whole group (about 100 MB of JPEG bytes for 256
    photos) into a fresh buffer each time, and on a VM every fresh page is costly (1.2-1.9 s
    per 1,000 such photos, against 0.2 s for small batches whose memory is reused). A worker
    reads its chunks in order, so the cursor only moves forward; rows before a chunk (another
    worker's) are read and dropped.
    """

    def __init__(self, source: Path, row_group: int, columns: list[str]) -> None:
        self.row_group = row_group
        parquet = open_parquet(source)
        self._batches = parquet.iter_batches(
            batch_size=IMAGE_BATCH_ROWS, row_groups=[row_group], columns=columns
        )
        self._position = 0  # the row-group row of the first row in `_pending`
        self._pending: list[pa.RecordBatch] = []

    def can_reach(self, chunk: Chunk) -> bool:
        """Whether the chunk's rows are still ahead of the cursor."""
        return chunk.row_group == self.row_group and chunk.offset >= self._position

    def take(self, chunk: Chunk) -> pa.Table:
        """The chunk's rows; the cursor moves past them."""
        stop = chunk.offset + chunk.length
        pending_rows = sum(batch.num_rows for batch in self._pending)
        while self._position + pending_rows < stop:
            batch = next(self._batches, None)
            if batch is None:
                raise VlbenchError(f"row group {self.row_group} ends before row {stop} of a chunk")
            self._pending.append(batch)
            pending_rows += batch.num_rows
        table = pa.Table.from_batches(self._pending, schema=self._pending[0].schema)
        rows = table.slice(chunk.offset - self._position, chunk.length)
        # Keep only the batches that still hold rows after this chunk.
        kept, first = [], self._position
        for batch in self._pending:
            if first + batch.num_rows > stop:
                kept.append(batch)
            else:
                self._position = first + batch.num_rows
            first += batch.num_rows
        self._pending = kept
        return rows


def stream_image_chunks(
    dataset: ImageChunks, num_workers: int, pin_memory: bool, prefetch: int = PREFETCH_BATCHES
) -> Generator[dict[str, Any], None, None]:
    """The dataset's chunks in order, decoded by `num_workers` worker processes, which start
    at the call (and decode up to `prefetch` chunks each before the first is taken)."""
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=None,
        shuffle=False,
        num_workers=num_workers,
        pin_memory=pin_memory,
        prefetch_factor=prefetch if num_workers > 0 else None,
        persistent_workers=False,
    )
    return _checked(iter(loader))


def _checked(chunks: Iterator[dict[str, Any]]) -> Generator[dict[str, Any], None, None]:
    for item in chunks:
        if "error" in item:
            raise VlbenchError(item["error"])
        yield item
