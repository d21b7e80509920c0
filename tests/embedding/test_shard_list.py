"""A pair's list of stored shards: written by its embed job, read by its gather job."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from vlbench.embedding.identity import identity_digest
from vlbench.embedding.matrix_files import MatrixFiles, load_embeddings, save_matrix
from vlbench.embedding.shard_list import (
    gather_pair,
    read_identity,
    write_identity,
    write_shard_list,
)
from vlbench.errors import VlbenchError

IDENTITY = {"model": {"name": "m"}, "model_files": "abc", "embedding": {"storage_dtype": "float32"}}
DIGEST = identity_digest(IDENTITY)


def stored_pair(resume: Path, rows: dict[str, list[int]]) -> dict[str, list]:
    """Shards of both modalities saved as an embed job saves them: (stem, record) per shard."""
    generator = np.random.default_rng(0)
    listed: dict[str, list] = {}
    for modality, sizes in rows.items():
        listed[modality], start = [], 0
        for index, size in enumerate(sizes):
            stem = f"{modality}/shard-{index:05d}"
            ids = [f"{modality}{row}" for row in range(start, start + size)]
            matrix = generator.standard_normal((size, 4)).astype(np.float32)
            record = {"modality": modality, "rows": [start, start + size], "content_key": stem}
            record = save_matrix(MatrixFiles.at(resume / stem), ids, matrix, record)
            listed[modality].append((stem, {**record, "reused": False}))
            start += size
    return listed


def outputs(folder: Path) -> dict[str, MatrixFiles]:
    return {modality: MatrixFiles.at(folder / modality) for modality in ("image", "text")}


def test_the_gather_concatenates_the_listed_shards_in_order(tmp_path: Path) -> None:
    resume = tmp_path / "shards"
    listed = stored_pair(resume, {"image": [3, 2], "text": [4]})
    write_shard_list(tmp_path / "shards.json", IDENTITY, listed)
    rows = gather_pair(tmp_path / "shards.json", DIGEST, resume, outputs(tmp_path))
    assert rows == {"image": 5, "text": 4}
    matrix, ids = load_embeddings(tmp_path / "image.npy", tmp_path / "image.ids.parquet")
    expected = np.concatenate(
        [np.load(resume / f"image/shard-0000{index}.npy") for index in range(2)]
    )
    np.testing.assert_array_equal(matrix, expected)
    assert list(ids) == [f"image{row}" for row in range(5)]


def test_a_list_written_for_another_identity_stops_the_gather(tmp_path: Path) -> None:
    resume = tmp_path / "shards"
    write_shard_list(
        tmp_path / "shards.json", IDENTITY, stored_pair(resume, {"image": [2], "text": [2]})
    )
    other = {**IDENTITY, "model_files": "def"}
    with pytest.raises(VlbenchError, match=r"shards\.json: lists shards embedded for another"):
        gather_pair(tmp_path / "shards.json", identity_digest(other), resume, outputs(tmp_path))
    assert not (tmp_path / "image.npy").exists()


@pytest.mark.parametrize("damage", ["missing", "flipped"])
def test_a_listed_shard_gone_or_damaged_stops_the_gather_naming_it(
    tmp_path: Path, damage: str
) -> None:
    resume = tmp_path / "shards"
    write_shard_list(
        tmp_path / "shards.json", IDENTITY, stored_pair(resume, {"image": [2, 2], "text": [2]})
    )
    shard = resume / "image" / "shard-00001.npy"
    if damage == "missing":
        shard.unlink()
    else:
        data = bytearray(shard.read_bytes())
        data[-1] ^= 0xFF
        shard.write_bytes(bytes(data))
    with pytest.raises(VlbenchError, match=rf"{shard}: .*--forcerun embed"):
        gather_pair(tmp_path / "shards.json", DIGEST, resume, outputs(tmp_path))


def test_an_unreadable_list_is_named(tmp_path: Path) -> None:
    (tmp_path / "shards.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(VlbenchError, match=r"shards\.json: not a readable list of stored shards"):
        gather_pair(tmp_path / "shards.json", DIGEST, tmp_path, outputs(tmp_path))


def test_a_list_naming_the_same_stored_files_is_left_as_it_is(tmp_path: Path) -> None:
    """A rerun that reused every shard leaves the list's bytes and time; a re-embedded shard
    (another content key) or another identity rewrites it."""
    resume, path = tmp_path / "shards", tmp_path / "shards.json"
    listed = stored_pair(resume, {"image": [2], "text": [2]})
    write_shard_list(path, IDENTITY, listed)
    old = 946_684_800 * 10**9
    os.utime(path, ns=(old, old))
    before = path.read_bytes()
    reused = {
        m: [(stem, {**record, "reused": True}) for stem, record in e] for m, e in listed.items()
    }
    write_shard_list(path, IDENTITY, reused)
    assert path.read_bytes() == before and path.stat().st_mtime_ns == old

    stem, record = listed["text"][0]
    write_shard_list(path, IDENTITY, {**listed, "text": [(stem, {**record, "content_key": "new"})]})
    assert json.loads(path.read_text())["modalities"]["text"][0]["record"]["content_key"] == "new"
    write_shard_list(path, {**IDENTITY, "model_files": "x"}, listed)
    assert json.loads(path.read_text())["identity"] == identity_digest(
        {**IDENTITY, "model_files": "x"}
    )


def test_the_identity_file_records_the_digest_the_lists_carry(tmp_path: Path) -> None:
    write_identity(tmp_path / "identity.json", IDENTITY)
    assert read_identity(tmp_path / "identity.json") == DIGEST
    (tmp_path / "identity.json").write_text("[]", encoding="utf-8")
    with pytest.raises(VlbenchError, match=r"identity\.json: not a readable identity file"):
        read_identity(tmp_path / "identity.json")
