"""Every stored file a later job trusts is checked against the digest recorded with it.

Each kind (a stored embedding shard's matrix and ids, a pixel-cache array, a gathered matrix and
its ids, a faiss index) is damaged two ways, bytes flipped in place (same size) and truncated,
and the reader must never use it: a shard is embedded again and its gather is byte-identical to
the clean one, a pixel array is decoded again, a gathered file or index stops its reader with one
line naming the file and the command that makes it again. The whole workflow's view of the same
faults is in tests/end_to_end/test_stored_file_faults.py.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from embed_support import (
    count_embedded_shards,
    embed_with_loaded_model,
    tiny_model,
    write_images,
    write_texts,
)
from stored_files import DAMAGES

from vlbench.embedding.matrix_files import (
    MatrixFiles,
    load_embeddings,
    require_gathered_intact,
    save_matrix,
)
from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_files import Shard, ShardStore
from vlbench.errors import VlbenchError
from vlbench.hashing import file_digest, require_sidecar_intact, sidecar
from vlbench.rank.index import build_flat_index

ROWS = 13  # three shards of at most 5 rows


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("bench")
    write_images(directory / "images.parquet", ROWS, row_group_size=4)
    write_texts(directory / "texts.parquet", ROWS, row_group_size=4)
    return directory


def embed(directory: Path, out: Path, modality: str) -> Path:
    settings = EmbedSettings.from_config(batch_size=4, shard_size=5)
    source = directory / ("images.parquet" if modality == "image" else "texts.parquet")
    return embed_with_loaded_model(
        tiny_model(),
        {"name": "vlbench-tiny"},
        source,
        modality,
        settings,
        out / "emb",
        out / "pixels",
    )


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("part", ["shard-00001.npy", "shard-00001.ids.parquet"])
def test_a_damaged_stored_shard_is_embedded_again_never_reused(
    bench: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    part: str,
    damage: str,
) -> None:
    gathered = embed(bench, tmp_path, "image")
    clean = gathered.read_bytes()
    damaged = tmp_path / "emb" / "shards" / "image" / part
    DAMAGES[damage](damaged)
    embedded = count_embedded_shards(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="vlbench"):
        again = embed(bench, tmp_path, "image")
    assert embedded == [(5, 10)]  # only the damaged shard
    assert again.read_bytes() == clean
    (line,) = [r.getMessage() for r in caplog.records if "not reused" in r.getMessage()]
    assert str(damaged) in line and "do not match" in line and "embedding it again" in line


def test_a_shard_stored_without_digests_is_not_trusted(tmp_path: Path) -> None:
    store = ShardStore(tmp_path, {"model": "m"})
    shard = Shard("text", tmp_path / "texts.parquet", 0, 0, 2, "t0")
    record = store.save(shard, ["a", "b"], np.eye(2, 4, dtype=np.float32), {"rows": [0, 2]})
    assert store.stored(shard) == record and set(record["files"]) == {"embeddings", "ids"}
    older = {key: value for key, value in record.items() if key != "files"}
    store.files(shard).provenance.write_text(json.dumps(older))
    assert store.stored(shard) is None


@pytest.mark.parametrize("damage", [*DAMAGES, "digest lost"])
def test_a_damaged_pixel_cache_array_is_decoded_again_never_used(
    bench: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    """The stored shards are gone (say, a new model with the same transform): the job reads the
    pixel cache, finds one array damaged, and decodes its rows again: the same numbers."""
    clean = embed(bench, tmp_path, "image").read_bytes()
    cached = sorted((tmp_path / "pixels").rglob("rows-*.npy"))
    assert len(cached) == 3 and all(sidecar(path).is_file() for path in cached)
    target = cached[1]
    if damage == "digest lost":
        sidecar(target).unlink()
    else:
        DAMAGES[damage](target)
    for path in (tmp_path / "emb" / "shards").rglob("shard-*"):
        path.unlink()
    with caplog.at_level(logging.WARNING, logger="vlbench"):
        again = embed(bench, tmp_path, "image")
    assert again.read_bytes() == clean
    (line,) = [r.getMessage() for r in caplog.records if "pixel cache" in r.getMessage()]
    assert str(target) in line and "decoding its rows again" in line
    assert sidecar(target).read_text().split()[1] == file_digest(target)  # made again


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("part", ["embeddings", "ids"])
def test_a_damaged_gathered_matrix_stops_its_reader_naming_the_file(
    tmp_path: Path, part: str, damage: str
) -> None:
    folder = tmp_path / "results" / "embeddings" / "tiny" / "bench"
    folder.mkdir(parents=True)
    files = MatrixFiles.at(folder / "image")
    rows = np.random.default_rng(0).normal(size=(40, 8)).astype(np.float32)
    save_matrix(files, [f"i{n}" for n in range(40)], rows, {"modality": "image"})
    assert np.array_equal(load_embeddings(files.embeddings, files.ids)[0], rows)
    damaged = getattr(files, part)
    DAMAGES[damage](damaged)
    with pytest.raises(VlbenchError) as error:
        load_embeddings(files.embeddings, files.ids)
    message = str(error.value)
    assert message.startswith(f"{damaged}: its bytes do not match the xxh3_128 digest")
    assert "`vlbench clean tiny bench` and the same snakemake command" in message
    assert "\n" not in message
    files.provenance.unlink()  # no record at all: not trusted either
    with pytest.raises(VlbenchError, match="no digest was recorded"):
        require_gathered_intact(files.embeddings)


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_index_stops_the_job_that_reads_it(tmp_path: Path, damage: str) -> None:
    files = MatrixFiles.at(tmp_path / "image")
    save_matrix(files, ["a", "b", "c"], np.eye(3, 4, dtype=np.float32), {})
    index = tmp_path / "image.faiss"
    build_flat_index(files.embeddings, index)
    assert sidecar(index).read_text().split() == ["xxh3_128", file_digest(index)]
    require_sidecar_intact(index, "remedy")
    DAMAGES[damage](index)
    with pytest.raises(VlbenchError, match=rf"^{index}: its bytes do not match .*; remedy$"):
        require_sidecar_intact(index, "remedy")
