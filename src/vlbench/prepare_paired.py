"""Prepare a paired 1-to-1 image-caption benchmark (BioMedFlickr layout) in canonical form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from vlbench.atomic import atomic_path, write_text
from vlbench.canonical import IMAGES_SCHEMA, QRELS_SCHEMA, TEXTS_SCHEMA
from vlbench.errors import VlbenchError

REQUIRED_COLUMNS = ("image", "caption")
ROW_GROUP_ROWS = 256


def check_columns(path: Path, schema: pa.Schema) -> None:
    """Fail with the file name when the source parquet lacks the paired protocol's columns."""
    missing = [name for name in REQUIRED_COLUMNS if name not in schema.names]
    if missing:
        raise VlbenchError(
            f"{path}: missing column(s) {', '.join(missing)} for the paired protocol "
            f"(has: {', '.join(schema.names)})"
        )
    image_type = schema.field("image").type
    if not (pa.types.is_struct(image_type) and image_type.get_field_index("bytes") >= 0):
        raise VlbenchError(
            f"{path}: column 'image' must be the datasets Image struct {{bytes, path}}, "
            f"found {image_type}"
        )


def _image_bytes(path: Path, row: int, value: dict[str, Any] | None) -> bytes:
    if value is None or not value.get("bytes"):
        raise VlbenchError(f"{path}: row {row}: the image has no encoded bytes")
    return value["bytes"]


def _caption(path: Path, row: int, value: str | None) -> str:
    if value is None or not value.strip():
        raise VlbenchError(f"{path}: row {row}: the caption is empty")
    return value


def prepare_paired(files: list[Path], out_dir: str | Path, provenance: dict[str, Any]) -> int:
    """Stream the source files into images/texts/qrels parquet; row i's image pairs row i's caption.

    Ids are the global row numbers. Returns the number of pairs.
    """
    out_dir = Path(out_dir)
    row = 0
    with (
        atomic_path(out_dir / "images.parquet") as images_tmp,
        atomic_path(out_dir / "texts.parquet") as texts_tmp,
    ):
        with (
            pq.ParquetWriter(images_tmp, IMAGES_SCHEMA) as images_out,
            pq.ParquetWriter(texts_tmp, TEXTS_SCHEMA) as texts_out,
        ):
            for path in files:
                source = pq.ParquetFile(path)
                check_columns(path, source.schema_arrow)
                for batch in source.iter_batches(
                    batch_size=ROW_GROUP_ROWS, columns=REQUIRED_COLUMNS
                ):
                    ids = [str(row + offset) for offset in range(batch.num_rows)]
                    images = [
                        _image_bytes(path, row + i, value)
                        for i, value in enumerate(batch.column("image").to_pylist())
                    ]
                    captions = [
                        _caption(path, row + i, value)
                        for i, value in enumerate(batch.column("caption").to_pylist())
                    ]
                    nulls = pa.nulls(batch.num_rows, pa.string())
                    images_out.write_table(
                        pa.table([ids, images, nulls], schema=IMAGES_SCHEMA),
                        row_group_size=ROW_GROUP_ROWS,
                    )
                    texts_out.write_table(
                        pa.table([ids, captions, nulls], schema=TEXTS_SCHEMA),
                        row_group_size=ROW_GROUP_ROWS,
                    )
                    row += batch.num_rows
        if row == 0:
            raise VlbenchError(f"{files[0] if files else out_dir}: the benchmark has no rows")
    ids = [str(i) for i in range(row)]
    with atomic_path(out_dir / "qrels.parquet") as tmp:
        pq.write_table(
            pa.table([ids, ids, pa.array([1] * row, pa.int32())], schema=QRELS_SCHEMA), tmp
        )
    meta = {**provenance, "protocol": "paired", "n_images": row, "n_texts": row, "n_qrels": row}
    write_text(out_dir / "benchmark.json", json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return row
