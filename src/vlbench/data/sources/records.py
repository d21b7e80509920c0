"""What every source loader hands to the canonical writer: lazily read images plus small tables."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

ImageBytes = bytes | Callable[[], bytes]


@dataclass(frozen=True)
class ImageRecord:
    """One image of a benchmark; `data` is its encoded bytes or a function that reads them."""

    image_id: str
    data: ImageBytes
    group: str | None = None
    where: str = ""

    def read(self) -> bytes:
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
