"""Paired image-caption parquet in a hub dataset layout (BioMedFlickr): row i <-> row i."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from vlbench.data.canonical import IMAGE_BATCH_ROWS, open_parquet, read_parquet
from vlbench.data.hub_layout import split_files, split_patterns
from vlbench.data.sources.records import ImageRecord, SourceData, image_values
from vlbench.errors import VlbenchError


def check_image_struct(path: Path, schema: pa.Schema, column: str) -> None:
    """Fail unless `column` is the datasets Image struct {bytes, path}."""
    image_type = schema.field(column).type
    if not (pa.types.is_struct(image_type) and image_type.get_field_index("bytes") >= 0):
        raise VlbenchError(
            f"{path}: column '{column}' must be the datasets Image struct {{bytes, path}}, "
            f"found {image_type}"
        )


def check_columns(path: Path, schema: pa.Schema, required: tuple[str, ...], what: str) -> None:
    """Fail with the file name when a source parquet lacks required columns."""
    missing = [name for name in required if name not in schema.names]
    if missing:
        raise VlbenchError(
            f"{path}: missing column(s) {', '.join(missing)} for {what} "
            f"(has: {', '.join(schema.names)})"
        )


def text_value(value: Any, path: Path, column: str, row: int, what: str) -> str:
    """A non-empty string cell of a text column, else a one-line error naming file, column, row."""
    if value is None:
        raise VlbenchError(f"{path}: row {row}: the {what} is empty")
    if not isinstance(value, str):
        raise VlbenchError(
            f"{path}: row {row}: column '{column}' holds {type(value).__name__} {value!r}, "
            f"not text (the {what} column must hold strings)"
        )
    if not value.strip():
        raise VlbenchError(f"{path}: row {row}: the {what} is empty")
    return value


def read_paired_files(files: list[Path], caption_column: str = "caption") -> SourceData:
    """Read paired rows from the split's parquet files; ids are the global row numbers.

    Errors name the file and the row within it.
    """
    texts: list[tuple[str, str, str | None]] = []
    for path in files:
        schema = pq.read_schema(path)
        check_columns(path, schema, ("image", caption_column), "the paired protocol")
        check_image_struct(path, schema, "image")
    for path in files:
        column = read_parquet(path, columns=[caption_column]).column(caption_column)
        for number, value in enumerate(column.to_pylist()):
            caption = text_value(value, path, caption_column, number, "caption")
            texts.append((str(len(texts)), caption, None))

    def images() -> Iterator[ImageRecord]:
        offset = 0  # the id: the row number over all files; messages name the file's own row
        for path in files:
            source = open_parquet(path)
            row = 0
            for batch in source.iter_batches(batch_size=IMAGE_BATCH_ROWS, columns=["image"]):
                for value in image_values(batch.column("image")):
                    yield ImageRecord(str(offset), value, None, f"{path}: row {row}")
                    offset += 1
                    row += 1

    qrels = [(text_id, text_id, 1) for text_id, _, _ in texts]
    return SourceData(images(), texts, qrels, info={"files": [path.name for path in files]})


def hub_patterns(source: dict[str, Any]) -> Any:
    """The card decides which files hold the split."""
    config = source.get("config", "default")
    return lambda card_dir: split_patterns(card_dir, source.get("split", "test"), config)


def load(root: Path, source: dict[str, Any], benchmark: dict[str, Any], where: str) -> SourceData:
    """BioMedFlickr-layout paired benchmark from a hub-layout folder."""
    files = split_files(root, source.get("split", "test"), source.get("config", "default"))
    return read_paired_files(files, source.get("columns", {}).get("caption", "caption"))
