"""What every source loader hands to the canonical writer: lazily read images plus small tables."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc

# An image's encoded bytes: a bytes object, or a one-row binary array that still points into
# the source file's memory (parquet sources: no copy of the bytes until the writer's).
EncodedImage = bytes | pa.Array
ImageBytes = EncodedImage | Callable[[], bytes]


def encoded_size(data: EncodedImage) -> int:
    """The length of an encoded image, in bytes."""
    return len(data[0].as_buffer()) if isinstance(data, pa.Array) else len(data)


def open_encoded(data: EncodedImage) -> IO[bytes]:
    """A file object over an encoded image, for PIL (an array's bytes are copied for it: PIL
    treats other file objects differently, so the checks' reasons would change)."""
    return io.BytesIO(data[0].as_py() if isinstance(data, pa.Array) else data)


def image_values(column: pa.Array) -> list[EncodedImage]:
    """Each row of a datasets Image struct column ({bytes, path}) as its encoded bytes: a
    one-row slice of the column's bytes (no copy), or b"" where the struct or its bytes are
    missing or empty (reported as undecodable)."""
    data = column.field("bytes")
    if not pa.types.is_binary(data.type):
        data = data.cast(pa.binary())
    present = column.is_valid().to_pylist()
    lengths = pc.binary_length(data).to_pylist()
    return [
        data.slice(row, 1) if there and length else b""
        for row, (there, length) in enumerate(zip(present, lengths, strict=True))
    ]


@dataclass(frozen=True)
class ImageRecord:
    """One image of a benchmark; `data` is its encoded bytes or a function that reads them."""

    image_id: str
    data: ImageBytes
    group: str | None = None
    where: str = ""

    def read(self) -> EncodedImage:
        """The encoded bytes (reading them from disk or an archive if needed)."""
        return self.data() if callable(self.data) else self.data


@dataclass(frozen=True)
class Candidates:
    """One query's restricted gallery, in the given order (and its groups, if ordered by group)."""

    query_modality: str
    query_id: str
    candidate_ids: list[str]
    candidate_groups: list[str] | None = None


@dataclass
class SourceData:
    """A benchmark as a loader reads it, before validation and writing.

    `images` is consumed once, streamed; `texts`, `qrels` and `candidates` are small tables.
    `info` is merged into benchmark.json (provenance and counts that only the loader knows).
    """

    images: Iterator[ImageRecord]
    texts: list[tuple[str, str, str | None]]
    qrels: list[tuple[str, str, int]]
    candidates: list[Candidates] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
