"""Content tracking: fingerprints of user-supplied files, and what each source and model reads."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vlbench.embedding.shard_files import plan_shards, shard_digests
from vlbench.planning.checks import model_fingerprint, source_files, source_fingerprint
from vlbench.planning.fingerprints import CONTENT_HASH_BYTES, fingerprint
from vlbench.planning.job_params import JobParams


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "bench"
    (root / "images" / "a").mkdir(parents=True)
    for number in range(5):
        (root / "images" / "a" / f"{number}.jpg").write_bytes(bytes([number]) * 10)
    (root / "metadata.csv").write_text("filepath,class\nimages/a/0.jpg,a\n", encoding="utf-8")
    return root


def test_any_edit_below_a_folder_changes_its_fingerprint(folder: Path) -> None:
    before = fingerprint([folder])
    assert fingerprint([folder]) == before and before.startswith("6 files ")
    image = folder / "images" / "a" / "3.jpg"
    stat = image.stat()
    image.write_bytes(b"x" * 11)  # in place, other size
    after_edit = fingerprint([folder])
    assert after_edit != before
    os.utime(image, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # same size, other time
    assert fingerprint([folder]) not in (before, after_edit)
    (folder / "images" / "a" / "5.jpg").write_bytes(b"new")
    assert fingerprint([folder]).startswith("7 files ")


def test_hidden_entries_and_the_folders_own_time_are_left_out(folder: Path) -> None:
    before = fingerprint([folder])
    (folder / ".cache").mkdir()
    (folder / ".cache" / "lock").write_text("x", encoding="utf-8")
    (folder / ".DS_Store").write_bytes(b"x")
    os.utime(folder, ns=(0, 0))
    assert fingerprint([folder]) == before


def test_a_small_named_file_is_tracked_by_content(tmp_path: Path) -> None:
    path = tmp_path / "model.json"
    path.write_text('{"embed_dim": 64}', encoding="utf-8")
    stat = path.stat()
    before = fingerprint([path])
    path.write_text('{"embed_dim": 32}', encoding="utf-8")  # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same time
    assert fingerprint([path]) != before


def test_a_large_named_file_is_tracked_by_size_and_time(tmp_path: Path) -> None:
    path = tmp_path / "weights.pt"
    with open(path, "wb") as handle:
        handle.truncate(CONTENT_HASH_BYTES + 1)
    before = fingerprint([path])
    os.utime(path, ns=(0, 12345))
    assert fingerprint([path]) != before


def test_missing_paths_and_link_loops(tmp_path: Path, folder: Path) -> None:
    assert fingerprint([]) == ""
    missing = fingerprint([tmp_path / "nowhere"])
    assert missing.startswith("0 files ")
    (folder / "images" / "loop").symlink_to(folder, target_is_directory=True)
    assert fingerprint([folder]).startswith("6 files ")  # the loop is walked once, not forever
    assert fingerprint([folder, folder]) == fingerprint([folder])


def test_a_local_source_tracks_its_folder_and_named_files_outside_it(
    tmp_path: Path, folder: Path
) -> None:
    outside = tmp_path / "shared-images"
    outside.mkdir()
    source = {
        "path": str(folder),
        "annotations": "metadata.csv",
        "images": [str(outside), "images"],
    }
    assert source_files(source) == [str(folder), str(folder / "metadata.csv"), str(outside)]
    before = source_fingerprint(source)
    (outside / "extra.jpg").write_bytes(b"x")
    assert source_fingerprint(source) != before
    assert source_files({"repo": "org/data", "revision": "0" * 40}) == []
    assert source_files({"synthetic": {"pairs": 4}}) == []


def test_a_model_tracks_its_config_and_local_weights_only(tmp_path: Path) -> None:
    config = tmp_path / "arch.json"
    config.write_text("{}", encoding="utf-8")
    weights = tmp_path / "weights.pt"
    weights.write_bytes(b"w")
    random_init = {"name": "arch", "model_config": str(config), "random_init_seed": 0}
    local = {"name": "arch", "model_config": str(config), "pretrained": str(weights)}
    assert model_fingerprint(random_init).startswith("1 files ")
    assert model_fingerprint(local).startswith("2 files ")
    assert model_fingerprint({"name": "ViT-B-32", "pretrained": "openai"}) == ""
    before = model_fingerprint(local)
    weights.write_bytes(b"v")
    assert model_fingerprint(local) != before and model_fingerprint(random_init).startswith("1 ")


def test_job_params_fingerprint_once_per_parse_and_read_the_live_config(
    tmp_path: Path, folder: Path
) -> None:
    """One parse fingerprints each model's and benchmark's files once (an edit is seen by the
    next parse), and an identity carries what the config holds when it is asked (a commit
    pinned on first use included)."""
    arch = tmp_path / "arch.json"
    arch.write_text("{}", encoding="utf-8")
    config = {
        "models": {"m": {"name": "arch", "model_config": str(arch), "random_init_seed": 0}},
        "benchmarks": {"b": {"source": {"kind": "local", "path": str(folder)}}},
        "embedding": {"batch_size": 8, "precision": "fp32", "storage_dtype": "float32"},
    }
    params = JobParams(config)
    model_files, source_files = params.model_files("m"), params.source_files("b")
    assert model_files == model_fingerprint(config["models"]["m"])
    assert source_files == source_fingerprint(config["benchmarks"]["b"]["source"])
    arch.write_text('{"embed_dim": 8}', encoding="utf-8")
    assert params.model_files("m") == model_files
    assert JobParams(config).model_files("m") != model_files
    config["models"]["m"]["revision"] = "0" * 40
    identity = params.embedding_identity("m")
    assert list(identity) == ["model", "model_files", "embedding"]
    assert identity["model"]["revision"] == "0" * 40 and identity["model_files"] == model_files


def write_texts(path: Path, texts: list[str]) -> None:
    ids = [f"t{i}" for i in range(len(texts))]
    pq.write_table(pa.table({"text_id": ids, "text": texts, "group": [None] * len(texts)}), path)


def test_shard_digests_change_only_for_the_shard_whose_rows_changed(tmp_path: Path) -> None:
    texts = [f"caption {i}" for i in range(10)]
    path = tmp_path / "texts.parquet"
    write_texts(path, texts)
    ranges = [(0, 4), (4, 8), (8, 10)]
    before = shard_digests(path, ranges)
    texts[5] = "caption 5, edited"
    write_texts(path, texts)
    after = shard_digests(path, ranges)
    assert [b == a for b, a in zip(before, after, strict=True)] == [True, False, True]
    assert [shard.digest for shard in plan_shards("text", path, 4)] == after


def test_image_shard_digests_follow_the_image_bytes(tmp_path: Path) -> None:
    path = tmp_path / "images.parquet"
    images = [bytes([i]) * 8 for i in range(4)]
    table = {"image_id": ["a", "b", "c", "d"], "image": images, "group": [None] * 4}
    pq.write_table(pa.table(table), path)
    before = shard_digests(path, [(0, 2), (2, 4)])
    table["image"] = [*images[:3], b"\x09" * 8]  # same size, other bytes
    pq.write_table(pa.table(table), path)
    after = shard_digests(path, [(0, 2), (2, 4)])
    assert before[0] == after[0] and before[1] != after[1]
