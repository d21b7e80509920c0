"""Row-group streaming: chunk planning, id ranges and decode errors."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from embed_support import tiny_model, write_images, write_texts

from vlbench.data.canonical import IMAGES_SCHEMA
from vlbench.embedding.image_transform import ImagePipeline
from vlbench.embedding.loader import (
    ImageChunks,
    plan_chunks,
    read_column_range,
    stream_image_chunks,
)
from vlbench.errors import VlbenchError


def test_chunks_stay_inside_row_groups_and_cover_the_range(tmp_path: Path) -> None:
    source = tmp_path / "texts.parquet"
    write_texts(source, 23, row_group_size=7)
    chunks = plan_chunks(source, 3, 20, chunk_rows=5)
    groups = [7, 7, 7, 2]
    rows = []
    for chunk in chunks:
        assert 0 < chunk.length <= 5
        assert chunk.offset + chunk.length <= groups[chunk.row_group]
        first = sum(groups[: chunk.row_group]) + chunk.offset
        rows.extend(range(first, first + chunk.length))
    assert rows == list(range(3, 20))


def test_id_ranges_read_only_what_is_asked(tmp_path: Path) -> None:
    source = tmp_path / "texts.parquet"
    write_texts(source, 23, row_group_size=7)
    assert read_column_range(source, "text_id", 6, 15) == [f"txt-{row:04d}" for row in range(6, 15)]
    assert read_column_range(source, "text_id", 22, 23) == ["txt-0022"]


def test_streamed_chunks_hold_uint8_pixels_in_file_order(tmp_path: Path) -> None:
    source = tmp_path / "images.parquet"
    write_images(source, 9, row_group_size=4)
    pipeline = ImagePipeline.from_model(tiny_model())
    dataset = ImageChunks(source, plan_chunks(source, 0, 9, 3), pipeline)
    items = list(stream_image_chunks(dataset, num_workers=0, pin_memory=False))
    assert [item["ids"] for item in items] == [
        ["img-0000", "img-0001", "img-0002"],
        ["img-0003"],
        ["img-0004", "img-0005", "img-0006"],
        ["img-0007"],
        ["img-0008"],
    ]
    assert all(item["pixels"].shape[1:] == (64, 64, 3) for item in items)


@pytest.mark.parametrize("workers", [0, 2])
def test_chunks_read_in_small_batches_match_the_whole_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """Chunks that straddle the reader's batches, several workers each skipping the other's
    chunks, and chunks asked for out of order all get exactly their own rows."""
    monkeypatch.setattr("vlbench.embedding.loader.IMAGE_BATCH_ROWS", 3)
    source = tmp_path / "images.parquet"
    write_images(source, 23, row_group_size=10)
    expected = pq.read_table(source).column("image").to_pylist()
    pipeline = ImagePipeline.from_model(tiny_model())
    chunks = plan_chunks(source, 2, 23, chunk_rows=4)
    dataset = ImageChunks(source, chunks, pipeline)
    items = list(stream_image_chunks(dataset, num_workers=workers, pin_memory=False))
    assert [i for item in items for i in item["ids"]] == [f"img-{r:04d}" for r in range(2, 23)]
    for chunk in reversed(chunks):  # backwards: every chunk restarts the cursor
        rows = dataset._rows(chunk)
        first = chunk.row_group * 10 + chunk.offset
        assert rows.column("image").to_pylist() == expected[first : first + chunk.length]


def test_undecodable_image_names_file_and_id(tmp_path: Path) -> None:
    source = tmp_path / "images.parquet"
    table = pa.table(
        [["ok", "broken"], [b"not an image", b"\xff\xd8garbage"], pa.nulls(2, pa.string())],
        schema=IMAGES_SCHEMA,
    )
    pq.write_table(table, source)
    pipeline = ImagePipeline.from_model(tiny_model())
    dataset = ImageChunks(source, plan_chunks(source, 0, 2, 2), pipeline)
    with pytest.raises(VlbenchError, match=r"images\.parquet: image 'ok' cannot be decoded") as err:
        list(stream_image_chunks(dataset, num_workers=1, pin_memory=False))
    assert "\n" not in str(err.value)
