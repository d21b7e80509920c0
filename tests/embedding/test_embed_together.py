"""Several models in one embed job: each image shard is decoded once for every model of a wave
that shares its geometry, and every model's numbers are those it gets alone."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from embed_support import tiny_model, write_images, write_texts

from vlbench.embedding import waves
from vlbench.embedding.identity import embedding_identity, identity_digest
from vlbench.embedding.job import run_plan
from vlbench.embedding.matrix_files import MatrixFiles, load_embeddings
from vlbench.embedding.models import EmbeddingModel
from vlbench.embedding.plan import EmbedJob, Pair, plan_job
from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_list import gather_pair

ROWS = 11
# Three models: two share their geometry (64 px, shortest side, bicubic) but not their
# normalisation; the third resizes with another filter.
MODELS = {
    "a": {"seed": 1},
    "b": {"seed": 2, "mean": (0.5, 0.4, 0.3), "std": (0.2, 0.3, 0.25)},
    "c": {"seed": 3, "interpolation": "bilinear"},
}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("bench")
    write_images(directory / "images.parquet", ROWS, row_group_size=4)
    write_texts(directory / "texts.parquet", ROWS, row_group_size=4)
    return {"image": directory / "images.parquet", "text": directory / "texts.parquet"}


def job_of(keys: list[str], sources: dict[str, Path], out: Path, **settings: object) -> EmbedJob:
    """One job: the models `keys` on the benchmark, shards of 5 rows, batches of 4 (unless
    `settings` say otherwise), the pixel cache under `out`."""
    chosen = EmbedSettings.from_config({"batch_size": 4, "shard_size": 5, "threads": 1, **settings})
    pairs = {}
    for key in keys:
        spec = {"name": "vlbench-tiny", "key": key}
        pairs[key, "bench"] = Pair(
            spec=spec,
            identity=embedding_identity(spec, "", asdict(chosen)),
            sources=sources,
            resume_dir=out / key / "shards",
            shard_list=out / key / "shards.json",
            pixel_folder=out / "pixels" / "bench",
        )
    return EmbedJob(chosen, pairs)


def run(
    keys: list[str], sources: dict[str, Path], out: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict, dict[str, dict[str, np.ndarray]], list[str]]:
    """The models `keys` through one job's plan and `run_plan` (shards of 5 rows, batches of
    4, pixel cache under `out`); each pair's records, gathered matrices, and the models
    loaded."""
    models: dict[str, EmbeddingModel] = {key: tiny_model(**MODELS[key]) for key in keys}
    loads: list[str] = []

    def load(spec, device=None):
        loads.append(spec["key"])
        return models[spec["key"]]

    monkeypatch.setattr(waves, "load_model", load)
    job = job_of(keys, sources, out)
    records = run_plan(plan_job(job))
    matrices = {}
    for (key, _), pair in job.pairs.items():
        files = {modality: MatrixFiles.at(out / key / modality) for modality in ("image", "text")}
        gather_pair(pair.shard_list, identity_digest(pair.identity), pair.resume_dir, files)
        matrices[key] = {
            modality: load_embeddings(files[modality].embeddings, files[modality].ids)[0]
            for modality in files
        }
    return records, matrices, loads


def test_models_sharing_a_geometry_see_each_image_shard_in_one_pass(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records, together, loads = run(list(MODELS), sources, tmp_path / "together", monkeypatch)
    assert loads == list(MODELS)  # each model loaded once
    for key in MODELS:
        _, alone, _ = run([key], sources, tmp_path / f"alone-{key}", monkeypatch)
        for modality in ("image", "text"):
            assert np.array_equal(together[key][modality], alone[key][modality]), (key, modality)
    image_records = {key: records[key, "bench"]["image"] for key in MODELS}
    assert [len(shards) for shards in image_records.values()] == [3, 3, 3]
    for key in ("a", "b"):  # one pass for both: each decoded the shard, none read the cache
        assert all(len(record["embedded_with"]) == 2 for record in image_records[key])
        assert all(record["pixel_cache"].startswith("miss") for record in image_records[key])
    assert not any("embedded_with" in record for record in image_records["c"])
    # One pixel-cache folder per geometry, each shard written once.
    folders = sorted((tmp_path / "together" / "pixels" / "bench").iterdir())
    assert [len(list(folder.glob("rows-*.npy"))) for folder in folders] == [3, 3]


# A job's plan in a process of its own, as the rule script makes it: the records of a complete
# plan (JSON, None when something is left to embed) and whether torch was imported.
STORED_RECORDS = """
import json, pickle, sys
from vlbench.embedding.plan import plan_job
from vlbench.embedding.shard_list import write_lists
with open(sys.argv[1], "rb") as handle:
    plan = plan_job(pickle.load(handle))
records = None if plan.models else write_lists(plan.pairs)
listed = None if records is None else {"/".join(pair): got for pair, got in records.items()}
print(json.dumps({"records": listed, "torch": "torch" in sys.modules}))
"""


def stored_records_apart(job: EmbedJob, folder: Path) -> dict:
    with open(folder / "jobs.pickle", "wb") as handle:
        pickle.dump(job, handle)
    command = [sys.executable, "-c", STORED_RECORDS, str(folder / "jobs.pickle")]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def test_a_job_whose_every_shard_is_stored_lists_them_without_torch(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same lists of stored shards and records as `run_plan` reusing every shard, in a
    process that never imports torch; a damaged shard leaves it to `run_plan`."""
    out = tmp_path / "out"
    run(["a", "b"], sources, out, monkeypatch)  # embeds every shard
    job = job_of(["a", "b"], sources, out)
    lists = [pair.shard_list for pair in job.pairs.values()]
    for path in lists:
        path.unlink()
    apart = stored_records_apart(job, tmp_path)
    written = [path.read_bytes() for path in lists]
    reused = run_plan(plan_job(job))  # every shard reused: writes the lists again
    assert apart["torch"] is False
    assert written == [path.read_bytes() for path in lists]
    expected = {"/".join(pair): got for pair, got in reused.items()}
    assert apart["records"] == json.loads(json.dumps(expected))
    assert all(r["reused"] for got in reused.values() for rs in got.values() for r in rs)
    for path in lists:
        path.unlink()
    damaged = out / "b" / "shards" / "image" / "shard-00001.npy"
    damaged.write_bytes(damaged.read_bytes()[:-1] + b"\0")
    assert stored_records_apart(job, tmp_path)["records"] is None
    assert not any(path.exists() for path in lists)


def test_a_wave_ends_when_its_models_fill_the_memory_share(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, together, _ = run(["a", "b"], sources, tmp_path / "together", monkeypatch)
    monkeypatch.setattr(waves, "MODEL_MEMORY_SHARE", 0.0)  # a wave per model
    records, apart, loads = run(["a", "b"], sources, tmp_path / "waves", monkeypatch)
    assert loads == ["a", "b"]
    image_records = [record for key in "ab" for record in records[key, "bench"]["image"]]
    assert not any("embedded_with" in record for record in image_records)
    # The second model read the shards the first one's pass wrote to the pixel cache.
    assert all(r["pixel_cache"].startswith("hit") for r in records["b", "bench"]["image"])
    for key in "ab":
        for modality in ("image", "text"):
            assert np.array_equal(apart[key][modality], together[key][modality])


def test_the_memory_budget_is_a_share_of_the_machine_capped_by_the_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    physical = waves.memory_budget(torch.device("cpu"))
    limit = tmp_path / "memory.max"
    limit.write_text("4000\n")
    monkeypatch.setattr(waves, "CGROUP_MEMORY_LIMITS", (str(limit), "/missing"))
    assert waves.memory_budget(torch.device("cpu")) == 1000
    limit.write_text("max\n")  # no limit
    assert waves.memory_budget(torch.device("cpu")) == physical


def test_a_pass_opened_ahead_is_closed_when_the_wave_fails(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first model's first image pass starts decoding before the next model loads; when
    that load fails, the decode workers stop and the pixel cache keeps no lock or partial."""
    import multiprocessing

    from vlbench.errors import VlbenchError

    original = waves.AheadPass.open
    opened = []

    def recording(work, model, settings):
        ahead = original(work, model, settings)
        opened.append(ahead)
        return ahead

    monkeypatch.setattr(waves.AheadPass, "open", staticmethod(recording))
    models = {"a": tiny_model(**MODELS["a"])}

    def load(spec, device=None):
        if spec["key"] not in models:
            raise VlbenchError("weights missing")
        return models[spec["key"]]

    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        patch.setattr(waves, "load_model", load)
        job = job_of(["a", "b"], sources, out, num_workers=1)
        with pytest.raises(VlbenchError, match=r"models\.b: weights missing"):
            run_plan(plan_job(job))
    assert opened[0] is not None and opened[0].pixels.stats["pixel_cache"].startswith("miss")
    assert multiprocessing.active_children() == []
    assert [path.name for path in (out / "pixels").rglob("*") if path.is_file()] == []


def test_the_adapters_import_ahead_and_no_thread_outlives_the_job(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from vlbench.embedding.models import dispatch

    started = []
    original = dispatch.import_adapters_ahead

    def recording(specs):
        thread = original(specs)
        started.append(thread)
        return thread

    monkeypatch.setattr(waves, "import_adapters_ahead", recording)
    run(["a"], sources, tmp_path / "out", monkeypatch)
    assert len(started) == 1 and not started[0].is_alive()
    assert "adapter-imports" not in [thread.name for thread in threading.enumerate()]


def test_a_damaged_stored_image_shard_is_checked_once_and_embedded_again(
    sources: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    out = tmp_path / "out"
    _, first, _ = run(["a", "b"], sources, out, monkeypatch)
    damaged = out / "a" / "shards" / "image" / "shard-00001.npy"
    damaged.write_bytes(damaged.read_bytes()[:-8] + b"\0" * 8)
    with caplog.at_level(logging.WARNING, logger="vlbench"):
        records, again, _ = run(["a", "b"], sources, out, monkeypatch)
    warnings = [r.getMessage() for r in caplog.records if "not reused" in r.getMessage()]
    assert len(warnings) == 1 and str(damaged) in warnings[0]
    assert [r["reused"] for r in records["a", "bench"]["image"]] == [True, False, True]
    assert all(r["reused"] for r in records["b", "bench"]["image"])
    assert np.array_equal(again["a"]["image"], first["a"]["image"])


def predicting(
    monkeypatch: pytest.MonkeyPatch, **transform: object
) -> list[waves.AheadPass | None]:
    """Make every spec predict the geometry of `tiny_model(**transform)` (no normalisation, as
    a prediction has none); returns the passes opened on a prediction."""
    import dataclasses

    from vlbench.embedding.image_transform import ImagePipeline

    guess = dataclasses.replace(
        ImagePipeline.from_model(tiny_model(**transform)), mean=None, std=None
    )
    monkeypatch.setattr(waves, "predicted_size", lambda spec: 64)
    monkeypatch.setattr(waves, "square_pipeline", lambda size: guess)
    opened: list[waves.AheadPass | None] = []
    original = waves.AheadPass.predicted

    def recording(work, settings):
        ahead = original(work, settings)
        opened.append(ahead)
        return ahead

    monkeypatch.setattr(waves.AheadPass, "predicted", staticmethod(recording))
    return opened


def test_a_pass_opened_on_a_predicted_geometry_gives_the_same_shards(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first pass decodes on the predicted geometry before any model loads; the loaded
    model confirms it, and every number and record is the one the job gives without it."""
    import multiprocessing

    plain_records, plain, _ = run(["b", "a"], sources, tmp_path / "plain", monkeypatch)
    opened = predicting(monkeypatch)  # the geometry of "a" and "b"
    records, predicted, loads = run(["b", "a"], sources, tmp_path / "predicted", monkeypatch)
    assert loads == ["b", "a"] and len(opened) == 1 and opened[0] is not None
    assert opened[0].key == ()  # taken by the first shard's pass
    for key in "ab":
        for modality in ("image", "text"):
            assert np.array_equal(predicted[key][modality], plain[key][modality])
        for got, want in zip(
            records[key, "bench"]["image"], plain_records[key, "bench"]["image"], strict=True
        ):
            # The loaded model's summary, normalisation included (the first model's, "b").
            assert got["pixel_geometry"] == want["pixel_geometry"]
            assert tuple(got["pixel_geometry"]["mean"]) == (0.5, 0.4, 0.3)
    assert multiprocessing.active_children() == []
    notes = list((tmp_path / "predicted" / "pixels" / "bench").glob("*/geometry.json"))
    plain_notes = list((tmp_path / "plain" / "pixels" / "bench").glob("*/geometry.json"))
    assert [n.read_bytes() for n in notes] == [n.read_bytes() for n in plain_notes]


def test_a_wrong_prediction_is_dropped_and_the_models_pass_opened(
    sources: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A predicted geometry the loaded model does not have: that pass is closed (its decode
    workers stopped, its partial cache shard removed) and the model's own pass embeds."""
    import multiprocessing

    _, plain, _ = run(["a"], sources, tmp_path / "plain", monkeypatch)
    opened = predicting(monkeypatch, interpolation="bilinear")
    _, predicted, _ = run(["a"], sources, tmp_path / "predicted", monkeypatch)
    assert opened[0] is not None and opened[0].key != ()  # never taken
    for modality in ("image", "text"):
        assert np.array_equal(predicted["a"][modality], plain["a"][modality])
    assert multiprocessing.active_children() == []
    folders = sorted((tmp_path / "predicted" / "pixels" / "bench").iterdir())
    wanted = {folder.name for folder in (tmp_path / "plain" / "pixels" / "bench").iterdir()}
    for folder in folders:  # the predicted geometry's folder holds no file, not even a lock
        files = [path.name for path in folder.iterdir()]
        assert folder.name in wanted or files == [], files
