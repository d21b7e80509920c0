"""Embedding shards: planning, the job's stored shards, gather, float16 storage and resume."""

from __future__ import annotations

import errno
import json
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np
import open_clip
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from embed_support import (
    TINY_CONFIG,
    count_embedded_shards,
    embed_with_loaded_model,
    reference_image_embeddings,
    tiny_model,
    write_images,
    write_texts,
)
from hypothesis import given
from hypothesis import strategies as st

from vlbench import atomic
from vlbench.data.canonical import TEXTS_SCHEMA
from vlbench.embedding import waves
from vlbench.embedding.encode import embed_rows
from vlbench.embedding.identity import embedding_identity, identity_digest
from vlbench.embedding.job import run_plan
from vlbench.embedding.matrix_files import MatrixFiles, load_embeddings, save_embeddings
from vlbench.embedding.models import EmbeddingModel, register_model_config
from vlbench.embedding.plan import EmbedJob, Pair, plan_job
from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_files import (
    Shard,
    ShardStore,
    gather_shards,
    plan_shards,
    shard_ranges,
)
from vlbench.embedding.shard_list import gather_pair
from vlbench.embedding.waves import LoadedModel
from vlbench.errors import VlbenchError

ROWS = 13


@given(rows=st.integers(1, 5000), size=st.integers(1, 700))
def test_shard_ranges_cover_every_row_once_in_order(rows: int, size: int) -> None:
    ranges = shard_ranges(rows, size)
    covered = [row for start, stop in ranges for row in range(start, stop)]
    assert covered == list(range(rows))
    assert all(0 < stop - start <= size for start, stop in ranges)
    assert len(ranges) == -(-rows // size)


def test_shards_are_planned_from_parquet_metadata(tmp_path: Path) -> None:
    source = tmp_path / "texts.parquet"
    write_texts(source, 10, row_group_size=3)
    shards = plan_shards("text", source, 4)
    assert [(shard.name, shard.start, shard.stop) for shard in shards] == [
        ("shard-00000", 0, 4),
        ("shard-00001", 4, 8),
        ("shard-00002", 8, 10),
    ]
    assert len({shard.digest for shard in shards}) == 3


def test_empty_source_is_a_user_error(tmp_path: Path) -> None:
    source = tmp_path / "texts.parquet"
    write_texts(source, 0, row_group_size=3)
    with pytest.raises(VlbenchError, match="no rows to embed"):
        plan_shards("text", source, 4)


@pytest.fixture(scope="module")
def benchmark_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bytes]]:
    directory = tmp_path_factory.mktemp("bench")
    images = write_images(directory / "images.parquet", ROWS, row_group_size=4)
    write_texts(directory / "texts.parquet", ROWS, row_group_size=4)
    return directory, images


def run(model, directory: Path, out: Path, modality: str, **changes) -> Path:
    settings = EmbedSettings.from_config(batch_size=4, shard_size=5, **changes)
    source = directory / ("images.parquet" if modality == "image" else "texts.parquet")
    return embed_with_loaded_model(
        model, {"name": "vlbench-tiny"}, source, modality, settings, out / "emb", out / "pixels"
    )


def test_sharded_images_equal_the_reference_and_are_gathered_in_order(
    benchmark_dir: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    directory, images = benchmark_dir
    model = tiny_model()
    out = run(model, directory, tmp_path, "image")
    matrix, ids = load_embeddings(out, tmp_path / "emb" / "image.ids.parquet")
    assert list(ids) == [f"img-{row:04d}" for row in range(ROWS)]
    # Shards of 5 rows with batches of 4: the reference batches the same rows per shard.
    reference = np.concatenate(
        [
            reference_image_embeddings(model, images[start : start + 5], batch_size=4)
            for start in range(0, ROWS, 5)
        ]
    )
    assert np.array_equal(matrix, reference)
    shards = sorted((tmp_path / "emb" / "shards" / "image").glob("shard-*.npy"))
    assert [p.name for p in shards] == ["shard-00000.npy", "shard-00001.npy", "shard-00002.npy"]
    record = json.loads((tmp_path / "emb" / "image.json").read_text())
    assert record["rows"] == ROWS
    assert [shard["rows"] for shard in record["shards"]] == [[0, 5], [5, 10], [10, 13]]


def test_texts_equal_direct_encoding(
    benchmark_dir: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    directory, _ = benchmark_dir
    model = tiny_model()
    out = run(model, directory, tmp_path, "text")
    matrix, ids = load_embeddings(out, tmp_path / "emb" / "text.ids.parquet")
    texts = pq.read_table(directory / "texts.parquet").column("text").to_pylist()
    expected = np.concatenate(
        [
            model.encode_texts(texts[s : s + 5][i : i + 4])
            for s in range(0, ROWS, 5)
            for i in range(0, len(texts[s : s + 5]), 4)
        ]
    )
    assert list(ids) == [f"txt-{row:04d}" for row in range(ROWS)]
    assert np.array_equal(matrix, expected)


def test_float16_storage_rounds_and_reads_back_as_float32(
    benchmark_dir: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    directory, _ = benchmark_dir
    model = tiny_model()
    full = run(model, directory, tmp_path / "a", "text")
    half = run(model, directory, tmp_path / "b", "text", storage_dtype="float16")
    assert np.load(half, allow_pickle=False).dtype == np.float16
    ids = tmp_path / "a" / "emb" / "text.ids.parquet"
    exact, _ = load_embeddings(full, ids)
    rounded, _ = load_embeddings(half, tmp_path / "b" / "emb" / "text.ids.parquet")
    assert rounded.dtype == np.float32
    assert np.array_equal(rounded, exact.astype(np.float16).astype(np.float32))
    assert 0 < np.abs(rounded - exact).max() < 1e-3


def test_rerun_recomputes_only_missing_shards(
    benchmark_dir: tuple[Path, list[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory, _ = benchmark_dir
    model = tiny_model()
    first = run(model, directory, tmp_path, "text")
    before = np.load(first, allow_pickle=False)
    (tmp_path / "emb" / "shards" / "text" / "shard-00001.npy").unlink()
    calls = count_embedded_shards(monkeypatch)
    again = run(model, directory, tmp_path, "text")
    assert calls == [(5, 10)]
    assert np.array_equal(np.load(again, allow_pickle=False), before)


def test_killed_shard_leaves_nothing_that_looks_finished(
    benchmark_dir: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    directory, _ = benchmark_dir
    model = tiny_model()
    encode = model.encode_images
    calls = {"n": 0}

    def dying(pixels):
        calls["n"] += 1
        if calls["n"] == 4:  # second batch of the second shard
            raise KeyboardInterrupt
        return encode(pixels)

    model.encode_images = dying  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        run(model, directory, tmp_path, "image")
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert not any(name.endswith(".partial") for name in files)
    assert "emb/shards/image/shard-00000.npy" in files
    assert not any("shard-00001" in name for name in files)
    assert not (tmp_path / "emb" / "image.npy").exists()


def test_gather_refuses_shards_that_disagree(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.zeros((2, 4), np.float32))
    np.save(tmp_path / "b.npy", np.zeros((2, 3), np.float32))
    shards = [MatrixFiles.at(tmp_path / name) for name in ("a", "b")]
    with pytest.raises(VlbenchError, match="disagree"):
        gather_shards(shards, [{}, {}], MatrixFiles.at(tmp_path / "out"))
    assert not (tmp_path / "out.npy").exists()


def test_gather_on_a_full_disk_is_one_line_and_leaves_no_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shards = []
    for name in ("a", "b"):
        files = MatrixFiles.at(tmp_path / name)
        ids = [f"{name}{row}" for row in range(1000)]
        save_embeddings(ids, np.ones((1000, 512), np.float32), files.embeddings, files.ids)
        shards.append(files)

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "posix_fallocate", full)
    out = tmp_path / "out" / "image.npy"
    with pytest.raises(VlbenchError) as caught:
        gather_shards(shards, [{"rows": [0, 1000]}] * 2, MatrixFiles.at(out.with_suffix("")))
    # 2000 x 512 float32 and a 128-byte header: 4,096,128 bytes.
    assert str(caught.value) == f"no space left on device for {out} (needs about 4.1 MB)"
    assert not out.exists()
    assert not list(tmp_path.rglob("*.partial"))


def test_decode_workers_follow_the_jobs_threads_unless_set() -> None:
    assert EmbedSettings.from_config(threads=3).decode_workers == 3
    assert EmbedSettings.from_config({"num_workers": 0}, threads=3).decode_workers == 0
    assert EmbedSettings.from_config({"num_workers": 5, "threads": 1}).decode_workers == 5


def embedding_job_run(
    directory: Path, out: Path, loads: list[int], monkeypatch: pytest.MonkeyPatch, texts: Path
) -> dict:
    """Both modalities of a benchmark through a job's plan and `run_plan` (shards of 5 rows),
    then the pair's gather as the workflow's gather job does it; count model loads."""
    model = tiny_model()

    def load(spec, device=None):
        loads.append(1)
        return model

    monkeypatch.setattr(waves, "load_model", load)
    spec = {"name": "vlbench-tiny"}
    settings = EmbedSettings.from_config(batch_size=4, shard_size=5, pixel_cache=False)
    pair = Pair(
        spec=spec,
        identity=embedding_identity(spec, "", asdict(settings)),
        sources={"image": directory / "images.parquet", "text": texts},
        resume_dir=out / "shards",
        shard_list=out / "shards.json",
    )
    plan = plan_job(EmbedJob(settings, {("tiny", "bench"): pair}))
    records = run_plan(plan)
    gathered = {modality: MatrixFiles.at(out / modality) for modality in ("image", "text")}
    gather_pair(pair.shard_list, identity_digest(pair.identity), pair.resume_dir, gathered)
    return records[("tiny", "bench")]


def test_an_embedding_job_embeds_both_modalities_with_one_model_load(
    benchmark_dir: tuple[Path, list[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory, _ = benchmark_dir
    loads: list[int] = []
    records = embedding_job_run(
        directory, tmp_path, loads, monkeypatch, directory / "texts.parquet"
    )
    assert loads == [1]
    assert list(records) == ["text", "image"]  # texts first
    assert [len(shards) for shards in records.values()] == [3, 3]
    assert not any(record["reused"] for shards in records.values() for record in shards)
    for modality in ("image", "text"):
        matrix, ids = load_embeddings(
            tmp_path / f"{modality}.npy", tmp_path / f"{modality}.ids.parquet"
        )
        assert matrix.shape[0] == len(ids) == ROWS
        provenance = json.loads((tmp_path / f"{modality}.json").read_text())
        assert [shard["reused"] for shard in provenance["shards"]] == [False] * 3


def test_a_rerun_reuses_stored_shards_and_re_embeds_only_changed_rows(
    benchmark_dir: tuple[Path, list[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory, _ = benchmark_dir
    texts = tmp_path / "texts.parquet"
    table = pq.read_table(directory / "texts.parquet")
    pq.write_table(table, texts)
    embedding_job_run(directory, tmp_path / "out", [], monkeypatch, texts)
    stored = tmp_path / "out" / "shards"
    mtimes = {path: path.stat().st_mtime_ns for path in stored.rglob("shard-*.npy")}
    loads: list[int] = []
    again = embedding_job_run(directory, tmp_path / "out", loads, monkeypatch, texts)
    assert loads == [] and all(record["reused"] for shards in again.values() for record in shards)
    captions = table.column("text").to_pylist()
    captions[7] += " (edited)"  # a caption of the second text shard
    edited = table.set_column(table.schema.get_field_index("text"), "text", pa.array(captions))
    pq.write_table(edited, texts)
    changed = embedding_job_run(directory, tmp_path / "out", loads, monkeypatch, texts)
    assert loads == [1]
    assert [record["reused"] for record in changed["text"]] == [True, False, True]
    assert all(record["reused"] for record in changed["image"])
    moved = {
        path.relative_to(stored).as_posix()
        for path, mtime in mtimes.items()
        if path.stat().st_mtime_ns != mtime
    }
    assert moved == {"text/shard-00001.npy"}
    assert json.loads((tmp_path / "out" / "text.json").read_text())["rows"] == ROWS


def test_a_stored_shard_is_reused_only_under_its_content_key(
    benchmark_dir: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    directory, _ = benchmark_dir
    identity = {"model": {"name": "vlbench-tiny"}, "embedding": {"batch_size": 4}}
    store = ShardStore(tmp_path, identity)
    shard = Shard("text", directory / "texts.parquet", 0, 0, 2, "t0")
    record = store.save(shard, ["a", "b"], np.eye(2, 4, dtype=np.float32), {"rows": [0, 2]})
    assert store.stored(shard) == record
    assert store.stored(Shard("text", shard.source, 0, 0, 2, "t1")) is None  # other rows
    assert ShardStore(tmp_path, {**identity, "model": {}}).stored(shard) is None  # other model
    store.files(shard).ids.unlink()
    assert store.stored(shard) is None  # incomplete


def wide_text_model(tmp_path: Path) -> EmbeddingModel:
    """The tiny architecture with a 512-wide text tower: wide enough that a text's embedding
    depends, in the last bits, on the batch it is encoded in (as for real CLIP towers)."""
    config = json.loads(TINY_CONFIG.read_text())
    config["text_cfg"].update(width=512, heads=8, layers=1)
    (tmp_path / "vlbench-wide-text.json").write_text(json.dumps(config))
    register_model_config("vlbench-wide-text", tmp_path / "vlbench-wide-text.json")
    torch.manual_seed(0)
    net = open_clip.create_model("vlbench-wide-text", pretrained=None, device="cpu").eval()
    tokenizer = open_clip.get_tokenizer("vlbench-wide-text")
    return EmbeddingModel(net, None, tokenizer, torch.device("cpu"), "fp32")


def test_identical_texts_get_identical_embeddings_whatever_their_batches(tmp_path: Path) -> None:
    """Duplicated captions of different lengths spread over batches of different sizes (the
    trimmed encoder groups a batch by length): every copy gets the one row of its text."""
    base = [f"caption {n} " + "of a stained section " * (n % 5) for n in range(23)]
    texts = base + base[::2] + base[1:9]  # copies land in other batches, next to other texts
    ids = [f"txt-{row:04d}" for row in range(len(texts))]
    source = tmp_path / "texts.parquet"
    nulls = pa.nulls(len(texts), pa.string())
    pq.write_table(pa.table([ids, texts, nulls], schema=TEXTS_SCHEMA), source, row_group_size=7)
    model = wide_text_model(tmp_path)
    first = [texts.index(text) for text in texts]
    # Encoded row by row in file order, some copies come out different: the fixture is sharp.
    batched = np.concatenate([model.encode_texts(texts[i : i + 5]) for i in range(0, 54, 5)])
    assert not np.array_equal(batched, batched[first])
    settings = EmbedSettings.from_config(batch_size=5)
    shard = Shard("text", source, 0, 0, len(texts))
    got_ids, matrix, stats = embed_rows(LoadedModel.of(model, {}, settings), shard, settings)
    assert got_ids == ids and stats["distinct_texts"] == len(base)
    assert np.array_equal(matrix, matrix[first])
    distinct = np.concatenate([model.encode_texts(base[i : i + 5]) for i in range(0, 23, 5)])
    assert np.array_equal(matrix[: len(base)], distinct)


def test_identical_texts_in_different_shards_get_one_embedding(tmp_path: Path) -> None:
    """Copies of a caption in other shards (encoded in other batches, so they may differ in the
    last bits) are gathered as the row of the text's first occurrence."""
    base = [f"caption {n} " + "of a stained section " * (n % 7) for n in range(30)]
    texts = base + base[::-1] + base[::3]  # shards of 16 rows: copies in every other shard
    ids = [f"txt-{row:04d}" for row in range(len(texts))]
    source = tmp_path / "texts.parquet"
    nulls = pa.nulls(len(texts), pa.string())
    pq.write_table(pa.table([ids, texts, nulls], schema=TEXTS_SCHEMA), source, row_group_size=7)
    model = wide_text_model(tmp_path)
    settings = EmbedSettings.from_config(batch_size=5, shard_size=16)
    out = embed_with_loaded_model(
        model, {"name": "vlbench-wide-text"}, source, "text", settings, tmp_path / "emb"
    )
    matrix, got_ids = load_embeddings(out, tmp_path / "emb" / "text.ids.parquet")
    assert list(got_ids) == ids
    first = [texts.index(text) for text in texts]
    assert np.array_equal(matrix, matrix[first])
    stored = np.concatenate(
        [np.load(path) for path in sorted((tmp_path / "emb" / "shards" / "text").glob("*.npy"))]
    )
    differing = sum(not np.array_equal(stored[row], stored[first[row]]) for row in range(len(ids)))
    assert differing > 0  # the shards alone disagree: the fixture is sharp
    record = json.loads((tmp_path / "emb" / "text.json").read_text())
    assert record["duplicate_text_rows_unified"] == differing
    assert np.array_equal(matrix[: len(base)], stored[: len(base)])


def test_shard_digests_hash_each_rows_id_length_and_payload(tmp_path: Path) -> None:
    """The digest formula stored shards are keyed by (a change would re-embed every stored
    shard): sha256 over each row's `id \\0 length \\0 payload`, missing payloads empty."""
    import hashlib

    images = [b"\x01" * 10, b"", b"\x02" * 5000, None]
    path = tmp_path / "images.parquet"
    pq.write_table(pa.table({"image_id": list("abcd"), "image": images}), path)
    expected = []
    for rows in ([0, 1], [2, 3]):
        digest = hashlib.sha256()
        for row in rows:
            data = images[row] or b""
            digest.update(f"{'abcd'[row]}\0{len(data)}\0".encode() + data)
        expected.append(digest.hexdigest()[:24])
    assert [shard.digest for shard in plan_shards("image", path, 2)] == expected
