"""The decodability check on several threads writes exactly what the one-thread check writes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fixtures_sources import BROKEN, image_bytes

from vlbench.data import canonical
from vlbench.data.prepare import prepare_benchmark
from vlbench.data.sources import writer
from vlbench.data.sources.image_check import decode_error
from vlbench.data.sources.records import ImageRecord, SourceData
from vlbench.data.synthetic import synthetic_table
from vlbench.embedding.loader import decode_image
from vlbench.errors import VlbenchError

OUTPUTS = ("images.parquet", "texts.parquet", "qrels.parquet", "candidates.parquet")
# Global row -> the bad image stored there (a mix of PIL failures and missing bytes).
TRUNCATED = image_bytes(7, size=(64, 48))[:1000]
BAD_ROWS: dict[int, dict[str, Any] | None] = {
    0: {"bytes": BROKEN, "path": "a.jpg"},
    5: {"bytes": b"", "path": "b.jpg"},
    6: None,
    13: {"bytes": TRUNCATED, "path": "c.jpg"},
    14: {"bytes": b"\x89PNG\r\n\x1a\n not a png", "path": "d.png"},
    30: {"bytes": b"GIF89a", "path": "e.gif"},
    41: {"bytes": BROKEN, "path": "f.jpg"},
}
ROWS = 42
FIRST_FILE_ROWS = 17


def write_repo(root: Path) -> None:
    """A BioMedFlickr-layout folder of two parquet shards with undecodable images mixed in."""
    table = synthetic_table(ROWS, seed=3)
    images = table.column("image").to_pylist()
    for row, value in BAD_ROWS.items():
        images[row] = value
    index = table.schema.get_field_index("image")
    table = table.set_column(
        index, table.schema.field(index), pa.array(images, table.schema.field(index).type)
    )
    (root / "data").mkdir(parents=True)
    pq.write_table(table.slice(0, FIRST_FILE_ROWS), root / "data" / "test-00000-of-00002.parquet")
    pq.write_table(table.slice(FIRST_FILE_ROWS), root / "data" / "test-00001-of-00002.parquet")


def prepare(repo: Path, out: Path, threads: int, **settings: Any) -> dict[str, Any]:
    return prepare_benchmark(
        "b", "paired", {"path": str(repo)}, None, out, settings, threads=threads
    )


@pytest.fixture
def small_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several row groups and a window that wraps many times, on a small fixture."""
    monkeypatch.setattr(writer, "ROW_GROUP_ROWS", 5)
    monkeypatch.setattr(writer, "CHECK_WINDOW_PER_THREAD", 2)


@pytest.mark.usefixtures("small_windows")
def test_threads_write_the_same_files_as_one_thread(tmp_path: Path) -> None:
    write_repo(tmp_path / "repo")
    reference = prepare(tmp_path / "repo", tmp_path / "one", threads=1, image_policy="skip")
    for threads in (2, 3, 8):
        out = tmp_path / f"threads-{threads}"
        meta = prepare(tmp_path / "repo", out, threads=threads, image_policy="skip")
        assert meta == reference
        assert json.loads((out / "benchmark.json").read_text()) == reference
        for name in OUTPUTS:
            assert (out / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name

    skipped = reference["skipped_images"]
    assert [entry["image_id"] for entry in skipped] == [str(row) for row in sorted(BAD_ROWS)]
    reasons = {entry["image_id"]: entry["reason"] for entry in skipped}
    assert reasons["5"] == reasons["6"] == "no bytes"
    assert reasons["0"] == reasons["41"] == "OSError: Truncated File Read"
    assert reasons["13"].startswith("OSError: image file is truncated")
    assert reasons["14"].startswith("UnidentifiedImageError: cannot identify image file")
    assert reference["n_source_images"] == ROWS
    assert reference["n_images"] == ROWS - len(BAD_ROWS)

    kept = [str(row) for row in range(ROWS) if row not in BAD_ROWS]
    images = pq.read_table(tmp_path / "one" / "images.parquet")
    assert images.column("image_id").to_pylist() == kept
    assert pq.ParquetFile(tmp_path / "one" / "images.parquet").metadata.num_row_groups == 7
    qrels = pq.read_table(tmp_path / "one" / "qrels.parquet").to_pylist()
    assert [(q["image_id"], q["text_id"]) for q in qrels] == [(i, i) for i in kept]


@pytest.mark.usefixtures("small_windows")
def test_the_fail_policy_names_the_images_whose_header_is_unreadable(tmp_path: Path) -> None:
    write_repo(tmp_path / "repo")
    messages = []
    for threads in (1, 4):
        with pytest.raises(VlbenchError) as info:
            prepare(tmp_path / "repo", tmp_path / "out", threads=threads)
        messages.append(str(info.value))
        assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert messages[0] == messages[1]
    # Row 13 is a truncated JPEG with a whole header: under `fail` the embedding job's decode
    # finds it (test_a_truncated_image_passes_prepare_and_fails_the_decode_naming_it).
    assert messages[0] == (
        "benchmarks.b: 6 image(s) cannot be read or decoded, e.g. '0' (OSError: Truncated File "
        "Read); '5' (no bytes); '6' (no bytes) (set image_policy: skip to leave them out and "
        "record them)"
    )


def test_a_truncated_image_passes_prepare_and_fails_the_decode_naming_it(
    tmp_path: Path,
) -> None:
    table = synthetic_table(6, seed=3)
    images = table.column("image").to_pylist()
    images[4] = {"bytes": TRUNCATED, "path": "c.jpg"}
    index = table.schema.get_field_index("image")
    table = table.set_column(
        index, table.schema.field(index), pa.array(images, table.schema.field(index).type)
    )
    (tmp_path / "repo" / "data").mkdir(parents=True)
    pq.write_table(table, tmp_path / "repo" / "data" / "test-00000-of-00001.parquet")

    meta = prepare(tmp_path / "repo", tmp_path / "out", threads=2)
    assert (meta["image_check"], meta["n_images"], meta["n_skipped_images"]) == ("header", 6, 0)
    stored = pq.read_table(tmp_path / "out" / "images.parquet").column("image").to_pylist()
    assert stored[4] == TRUNCATED
    with pytest.raises(VlbenchError) as info:
        decode_image(stored[4], "4", tmp_path / "out" / "images.parquet")
    assert str(info.value).startswith(
        f"{tmp_path / 'out' / 'images.parquet'}: image '4' cannot be decoded (image file is "
        "truncated"
    )
    assert str(info.value).endswith(
        "the benchmark's image_policy: skip leaves out the images that do not decode"
    )

    skipped = prepare(tmp_path / "repo", tmp_path / "skip", threads=2, image_policy="skip")
    assert (skipped["image_check"], skipped["n_images"]) == ("decode", 5)
    assert skipped["skipped_images"][0]["image_id"] == "4"


def unreadable() -> bytes:
    raise OSError("gone")


def records(items: list[tuple[str, Any]]) -> Iterator[ImageRecord]:
    for number, (image_id, data) in enumerate(items):
        yield ImageRecord(image_id, data, f"g{number % 3}", f"shard.parquet: row {number}")


MIXED = [
    ("a", image_bytes(1)),
    ("b", BROKEN),  # undecodable, still being checked when "c" is read
    ("c", unreadable),
    ("d", image_bytes(2, "PNG")),
    ("e", unreadable),
    ("f", b""),
    ("g", lambda: image_bytes(3)),
    ("h", BROKEN),
    ("i", image_bytes(4)),
]


def write_mixed(tmp_path: Path, name: str, threads: int, items: list[tuple[str, Any]]) -> dict:
    ids = [image_id for image_id, _ in items]
    data = SourceData(
        records(items), [(i, f"text {i}", None) for i in ids], [(i, i, 1) for i in ids]
    )
    return writer.write_canonical(
        data, "paired", tmp_path / name, {"split": "test"}, image_policy="skip", threads=threads
    )


@pytest.mark.usefixtures("small_windows")
def test_unreadable_and_undecodable_images_keep_their_source_order(tmp_path: Path) -> None:
    one = write_mixed(tmp_path, "one", 1, MIXED)
    many = write_mixed(tmp_path, "many", 3, MIXED)
    assert one == many
    assert [(e["image_id"], e["reason"][:12]) for e in many["skipped_images"]] == [
        ("b", "OSError: Tru"),
        ("c", "unreadable: "),
        ("e", "unreadable: "),
        ("f", "no bytes"),
        ("h", "OSError: Tru"),
    ]
    assert many["skipped_images"][1]["reason"] == "unreadable: gone"
    for name in OUTPUTS:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "many" / name).read_bytes()
    rows = pq.read_table(tmp_path / "many" / "images.parquet").to_pylist()
    assert [(r["image_id"], r["group"]) for r in rows] == [
        ("a", "g0"),
        ("d", "g0"),
        ("g", "g0"),
        ("i", "g2"),
    ]
    assert rows[2]["image"] == image_bytes(3)


def test_a_duplicate_id_names_its_file_and_row_on_any_thread_count(tmp_path: Path) -> None:
    items = [(f"i{n}", image_bytes(n)) for n in range(12)] + [("i3", image_bytes(3))]
    messages = set()
    for threads in (1, 2):
        with pytest.raises(VlbenchError) as info:
            write_mixed(tmp_path, f"out-{threads}", threads, items)
        messages.add(str(info.value))
    assert messages == {"shard.parquet: row 12: duplicate image id 'i3'"}


class CountingWriter:
    """Stands in for the parquet writer: records how far the source was read at each write."""

    def __init__(self, produced: list[int]) -> None:
        self.produced = produced
        self.ahead: list[int] = []
        self.rows = 0

    def write_table(self, table: pa.Table, row_group_size: int) -> None:
        self.rows += table.num_rows
        self.ahead.append(self.produced[0] - self.rows)


def ahead_of_the_writer(threads: int, sizes: list[int]) -> list[int]:
    """For each image written (one per row group), how many more the source had handed out."""
    produced = [0]

    def source() -> Iterator[ImageRecord]:
        for number, size in enumerate(sizes):
            produced[0] += 1
            yield ImageRecord(str(number), image_bytes(number % 4, size=(size, size)))

    sink = CountingWriter(produced)
    seen, bad, written = writer._stream_images(SourceData(source(), [], []), sink, "b", threads)
    assert (seen, bad, written) == (len(sizes), [], [str(n) for n in range(len(sizes))])
    return sink.ahead


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_only_a_bounded_window_of_images_is_held(
    monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    monkeypatch.setattr(writer, "ROW_GROUP_ROWS", 1)
    monkeypatch.setattr(writer, "CHECK_WINDOW_PER_THREAD", 3)
    ahead = ahead_of_the_writer(threads, [16] * 60)
    # Read but not yet written when an image is written: none with one thread, else the rest
    # of the window (the threads are kept busy, and no more is read ahead).
    window = 1 if threads == 1 else threads * writer.CHECK_WINDOW_PER_THREAD
    assert max(ahead) == window - 1


def test_the_window_of_large_images_is_bounded_by_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer, "ROW_GROUP_ROWS", 1)
    small, large = len(image_bytes(0, size=(16, 16))), len(image_bytes(0, size=(160, 160)))
    monkeypatch.setattr(writer, "CHECK_WINDOW_BYTES", 10 * small)
    assert large > 10 * small
    ahead = ahead_of_the_writer(3, [16] * 40 + [160] * 20 + [16] * 40)
    assert max(ahead[:20]) == 9  # small images: the byte bound, below 3 * 32 images
    assert max(ahead[45:55]) == 3  # large ones: one image per thread, and the one written
    assert max(ahead) <= 9


def test_image_bytes_are_stored_uncompressed_under_the_canonical_schema(tmp_path: Path) -> None:
    write_repo(tmp_path / "repo")
    prepare(tmp_path / "repo", tmp_path / "out", threads=2, image_policy="skip")
    path = tmp_path / "out" / "images.parquet"
    parquet = pq.ParquetFile(path)
    assert parquet.schema_arrow.equals(canonical.IMAGES_SCHEMA)
    # The only schema metadata: the decode policy the embedding jobs read (data/decode_policy).
    assert set(parquet.schema_arrow.metadata) == {b"vlbench.decode"}
    columns = parquet.metadata.row_group(0)
    by_name = {columns.column(i).path_in_schema: columns.column(i) for i in range(3)}
    assert by_name["image"].compression == "UNCOMPRESSED"
    assert not by_name["image"].has_dictionary_page
    assert by_name["image_id"].compression == "SNAPPY"
    table = canonical.read_table(path, canonical.IMAGES_SCHEMA)
    assert table.schema.equals(canonical.IMAGES_SCHEMA)
    assert list(canonical.read_ids(path, "image")) == table.column("image_id").to_pylist()
    raw = pq.read_table(sorted((tmp_path / "repo" / "data").glob("*.parquet"))[0])
    assert table.column("image")[0].as_py() == raw.column("image")[1].as_py()["bytes"]
    meta = json.loads((tmp_path / "out" / "benchmark.json").read_text())
    assert meta["n_images"] == table.num_rows


def test_the_reason_for_an_unidentifiable_image_is_the_same_every_run() -> None:
    reasons = {decode_error(b"not an image at all") for _ in range(3)}
    assert reasons == {"UnidentifiedImageError: cannot identify image file the image bytes"}


@pytest.mark.usefixtures("small_windows")
def test_images_handed_as_arrays_write_what_their_bytes_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parquet sources hand each image as a one-row slice of the source's array (no copy);
    the files are those the same images written from bytes objects give."""
    from vlbench.data.sources import hf_parquet, records

    write_repo(tmp_path / "repo")
    column = pq.read_table(tmp_path / "repo" / "data" / "test-00000-of-00002.parquet")["image"]
    values = records.image_values(column.combine_chunks())
    # Rows 5 (empty bytes) and 6 (no struct) have no bytes; row 0 (broken) is an array too.
    assert [isinstance(value, pa.Array) for value in values[:7]] == [True] * 5 + [False] * 2
    arrays = prepare(tmp_path / "repo", tmp_path / "arrays", threads=2, image_policy="skip")

    def as_bytes(column: pa.Array) -> list:
        return [v if isinstance(v, bytes) else v[0].as_py() for v in records.image_values(column)]

    monkeypatch.setattr(hf_parquet, "image_values", as_bytes)
    assert prepare(tmp_path / "repo", tmp_path / "bytes", threads=2, image_policy="skip") == arrays
    for name in OUTPUTS:
        assert (tmp_path / "arrays" / name).read_bytes() == (tmp_path / "bytes" / name).read_bytes()


def test_image_values_read_large_binary_structs_and_missing_bytes() -> None:
    from vlbench.data.sources.records import image_values

    struct = pa.struct([("bytes", pa.large_binary()), ("path", pa.string())])
    column = pa.array(
        [{"bytes": b"abc", "path": "a"}, None, {"bytes": None, "path": "c"}, {"bytes": b""}],
        struct,
    )
    values = image_values(column)
    assert values[0].to_pylist() == [b"abc"] and values[1:] == [b"", b"", b""]
