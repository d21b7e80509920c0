"""The synthetic source is a faithful BioMedFlickr hub layout, read back through the loader."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fixtures_sources import prepare_paired_files
from PIL import Image

from vlbench.data.hub_layout import split_files
from vlbench.data.synthetic import write_synthetic_biomedflickr
from vlbench.errors import VlbenchError


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("src") / "biomedflickr"
    write_synthetic_biomedflickr(path, pairs=30, seed=3)
    return path


def test_datasets_library_reads_the_layout_like_the_hub_repo(source: Path) -> None:
    """`datasets` itself decodes our directory: images become PIL images, captions match."""
    import datasets

    loaded = datasets.load_dataset(str(source), split="test")
    raw = pq.read_table(split_files(source, "test")[0])
    assert loaded.num_rows == 30
    assert loaded.features["image"].__class__.__name__ == "Image"
    assert loaded["caption"] == raw.column("caption").to_pylist()
    assert isinstance(loaded[0]["image"], Image.Image)


def test_images_cover_modes_and_formats(source: Path) -> None:
    table = pq.read_table(split_files(source, "test")[0])
    kinds = set()
    for value in table.column("image").to_pylist():
        with Image.open(io.BytesIO(value["bytes"])) as image:
            kinds.add((image.mode, image.format))
    assert {mode for mode, _ in kinds} >= {"RGB", "L", "RGBA", "CMYK", "P"}
    assert {fmt for _, fmt in kinds} == {"JPEG", "PNG"}
    sizes = set(
        zip(table.column("width").to_pylist(), table.column("height").to_pylist(), strict=True)
    )
    assert len(sizes) > 10


def test_generation_is_deterministic(tmp_path: Path, source: Path) -> None:
    again = tmp_path / "again"
    write_synthetic_biomedflickr(again, pairs=30, seed=3)
    first = split_files(source, "test")[0].read_bytes()
    assert split_files(again, "test")[0].read_bytes() == first


def test_prepare_pairs_row_i_with_row_i(source: Path, tmp_path: Path) -> None:
    files = split_files(source, "test")
    rows = prepare_paired_files(files, tmp_path, {"split": "test"})
    raw = pq.read_table(files[0])
    images = pq.read_table(tmp_path / "images.parquet")
    texts = pq.read_table(tmp_path / "texts.parquet")
    qrels = pq.read_table(tmp_path / "qrels.parquet")
    assert rows == 30
    assert texts.column("text").to_pylist() == raw.column("caption").to_pylist()
    assert images.column("image").to_pylist() == [
        v["bytes"] for v in raw.column("image").to_pylist()
    ]
    assert qrels.column("image_id").to_pylist() == qrels.column("text_id").to_pylist()
    assert qrels.column("image_id").to_pylist() == images.column("image_id").to_pylist()


def test_missing_split_names_directory_and_patterns(source: Path) -> None:
    with pytest.raises(VlbenchError, match=r"no parquet files .* split 'validation'"):
        split_files(source, "validation")


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(VlbenchError, match="does not exist"):
        split_files(tmp_path / "nowhere", "test")


def test_parquet_without_caption_column_names_file(tmp_path: Path) -> None:
    bad = tmp_path / "data" / "test-00000-of-00001.parquet"
    bad.parent.mkdir()
    pq.write_table(pa.table({"image": [{"bytes": b"x", "path": "a.jpg"}], "text": ["a"]}), bad)
    with pytest.raises(VlbenchError) as info:
        prepare_paired_files(split_files(tmp_path, "test"), tmp_path / "out", {})
    assert str(bad) in str(info.value) and "caption" in str(info.value)
    assert not (tmp_path / "out" / "images.parquet").exists()


def test_empty_caption_names_row(tmp_path: Path) -> None:
    bad = tmp_path / "data" / "test-00000-of-00001.parquet"
    bad.parent.mkdir()
    images = [{"bytes": b"x", "path": "a.jpg"}, {"bytes": b"y", "path": "b.jpg"}]
    pq.write_table(pa.table({"image": images, "caption": ["fine", "   "]}), bad)
    with pytest.raises(VlbenchError, match="row 1: the caption is empty"):
        prepare_paired_files(split_files(tmp_path, "test"), tmp_path / "out", {})
