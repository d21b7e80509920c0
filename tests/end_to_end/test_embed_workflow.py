"""The workflow's embedding stage on the shared demo run: shard plan, shard jobs, gather, resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import yaml
from workflow_helpers import copy_of_run, run_workflow

STEM = "results/embeddings/tiny/demo"
PAIRS, SHARD_SIZE = 40, 20


def test_gathered_matrix_is_the_shards_in_order(demo_run: Path) -> None:
    for modality in ("image", "text"):
        shards = sorted((demo_run / STEM / modality).glob("shard-*.npy"))
        assert [path.name for path in shards] == ["shard-00000.npy", "shard-00001.npy"]
        gathered = np.load(demo_run / STEM / f"{modality}.npy", allow_pickle=False)
        assert np.array_equal(gathered, np.concatenate([np.load(path) for path in shards]))
        ids = pq.read_table(demo_run / STEM / f"{modality}.ids.parquet").column("id").to_pylist()
        assert ids == [str(row) for row in range(PAIRS)]


def test_provenance_lists_every_shard_with_its_timing(demo_run: Path) -> None:
    record = json.loads((demo_run / STEM / "image.json").read_text())
    assert record["rows"] == PAIRS
    assert [shard["rows"] for shard in record["shards"]] == [[0, SHARD_SIZE], [SHARD_SIZE, PAIRS]]
    for shard in record["shards"]:
        assert shard["snakemake_benchmark"]["max_rss"] > 0
        assert shard["pixel_cache"].startswith("miss")
    assert len(list((demo_run / "results" / "pixels" / "demo").glob("*/rows-*.npy"))) == 2


def test_one_job_per_shard_index_embeds_both_modalities(demo_run: Path) -> None:
    for shard in ("shard-00000", "shard-00001"):
        job = json.loads((demo_run / STEM / "shards" / f"{shard}.json").read_text())
        assert sorted(job["modalities"]) == ["image", "text"]
        log = (demo_run / "logs" / "embed_shard" / "tiny" / "demo" / f"{shard}.log").read_text()
        assert log.count("model vlbench-tiny on cpu") == 1


def test_rerun_after_a_kill_recomputes_only_the_missing_shard(
    demo_run: Path, tmp_path: Path
) -> None:
    """A job killed after its text shard, before its image shard: the rerun keeps what was
    finished (the other job's shards, this job's text shard) and embeds only the image shard."""
    workdir = copy_of_run(demo_run, tmp_path)
    kept = [
        workdir / STEM / "image" / "shard-00000.npy",
        workdir / STEM / "text" / "shard-00001.npy",
    ]
    lost = workdir / STEM / "image" / "shard-00001.npy"
    before = np.load(workdir / STEM / "image.npy")
    kept_mtimes = [path.stat().st_mtime_ns for path in kept]
    for path in (
        lost,
        workdir / STEM / "shards" / "shard-00001.json",
        workdir / STEM / "image.npy",
    ):
        path.unlink()
    run_workflow(workdir, workdir / "config.yaml", f"{STEM}/image.npy", "--cores", "2")
    assert [path.stat().st_mtime_ns for path in kept] == kept_mtimes
    assert lost.is_file()
    assert np.array_equal(np.load(workdir / STEM / "image.npy"), before)
    log = (workdir / "logs" / "embed_shard" / "tiny" / "demo" / "shard-00001.log").read_text()
    assert "text rows 20-40: stored shard reused" in log
    assert "image rows 20-40" in log and "pixel cache hit" in log


def test_jobs_in_their_own_process_embed_what_the_warm_worker_embedded(
    demo_run: Path, tmp_path: Path
) -> None:
    """The demo's shard jobs ran in a warm worker's children; the same jobs in their own
    processes (`warm_workers.idle_seconds: 0`) write byte-identical shards."""
    workdir = copy_of_run(demo_run, tmp_path)
    for shard in ("shard-00000", "shard-00001"):
        log = (demo_run / "logs" / "embed_shard" / "tiny" / "demo" / f"{shard}.log").read_text()
        assert "a child of warm worker" in log
    # The light rules too (their own worker profile).
    for log in (demo_run / "logs" / "rank").rglob("*.log"):
        assert "a child of warm worker" in log.read_text(), log
    shutil.rmtree(workdir / STEM)
    shutil.rmtree(workdir / "results" / "pixels")
    config = workdir / "config.yaml"
    settings = yaml.safe_load(config.read_text())
    settings["warm_workers"] = {"idle_seconds": 0}
    config.write_text(yaml.safe_dump(settings))
    run_workflow(workdir, config, f"{STEM}/image.npy", f"{STEM}/text.npy", "--cores", "2")
    for shard in ("shard-00000", "shard-00001"):
        log = (workdir / "logs" / "embed_shard" / "tiny" / "demo" / f"{shard}.log").read_text()
        assert "the rule's own process" in log
    stored = sorted(path.relative_to(demo_run) for path in (demo_run / STEM).rglob("*.npy"))
    assert len(stored) == 6
    for path in stored:
        assert (workdir / path).read_bytes() == (demo_run / path).read_bytes(), path
