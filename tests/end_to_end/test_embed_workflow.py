"""The workflow's embedding stage on the shared demo run: one job, its shards, gather, resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from workflow_helpers import copy_of_run, run_workflow, tiny_model

from vlbench.report.provenance import read_snakemake_benchmark

STEM = "results/embeddings/tiny/demo"
SHARDS = f"{STEM}/shards"
LOG = "logs/embed/every-model.log"  # one embed job for every model (auto, one machine)
PAIRS, SHARD_SIZE = 40, 20


def test_gathered_matrix_is_the_shards_in_order(demo_run: Path) -> None:
    for modality in ("image", "text"):
        shards = sorted((demo_run / SHARDS / modality).glob("shard-*.npy"))
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
        assert shard["seconds"] > 0 and shard["peak_rss_mb"] > 0
        assert shard["pixel_cache"].startswith("miss") and shard["reused"] is False
    assert len(list((demo_run / "results" / "pixels" / "demo").glob("*/rows-*.npy"))) == 2
    # The whole job's wall time and peak memory: its Snakemake `benchmark:` file.
    timing = read_snakemake_benchmark(demo_run / "results/timings/embed/every-model.tsv")
    assert timing["s"] > 0 and timing["max_rss"] > 0


def test_the_embed_job_embeds_every_shard_with_one_model_load(
    demo_run: Path,
) -> None:
    log = (demo_run / LOG).read_text()
    assert log.count("model vlbench-tiny on cpu") == 1
    lines = [line.split(" INFO ", 1)[1] for line in log.splitlines() if " rows " in line]
    assert [line.split(":", 1)[0] for line in lines] == [
        "text rows 0-20",
        "text rows 20-40",
        "image rows 0-20",
        "image rows 20-40",
    ]


def test_rerun_after_a_kill_recomputes_only_the_missing_shard(
    demo_run: Path, tmp_path: Path
) -> None:
    """A job killed after its first image shard (before it listed the pair's shards): the rerun
    keeps every stored shard (both text shards, the first image shard) and embeds only the
    second image shard."""
    workdir = copy_of_run(demo_run, tmp_path)
    kept = [
        workdir / SHARDS / "image" / "shard-00000.npy",
        workdir / SHARDS / "text" / "shard-00000.npy",
        workdir / SHARDS / "text" / "shard-00001.npy",
    ]
    lost = workdir / SHARDS / "image" / "shard-00001.npy"
    before = np.load(workdir / STEM / "image.npy")
    kept_mtimes = [path.stat().st_mtime_ns for path in kept]
    listed = workdir / STEM / "shards.json"
    for path in (lost, lost.with_suffix(".json"), listed, workdir / STEM / "image.npy"):
        path.unlink()
    run_workflow(workdir, workdir / "config.yaml", f"{STEM}/image.npy", "--cores", "2")
    assert [path.stat().st_mtime_ns for path in kept] == kept_mtimes
    assert lost.is_file()
    assert np.array_equal(np.load(workdir / STEM / "image.npy"), before)
    log = (workdir / LOG).read_text()
    for rows in ("text rows 0-20", "text rows 20-40", "image rows 0-20"):
        assert f"{rows}: stored shard reused" in log
    assert "image rows 20-40" in log and "pixel cache hit" in log
    record = json.loads((workdir / STEM / "image.json").read_text())
    assert [shard["reused"] for shard in record["shards"]] == [True, False]


def test_speed_knobs_leave_the_embeddings_byte_identical(demo_run: Path, tmp_path: Path) -> None:
    """The demo's embedding job again from nothing, decoding in the job's own process instead of
    DataLoader workers and without the pixel cache: every stored and gathered matrix is
    byte-identical. (The thread count is left alone: CPU kernels may sum in another order.)"""
    workdir = copy_of_run(demo_run, tmp_path)
    shutil.rmtree(workdir / STEM)
    shutil.rmtree(workdir / "results" / "pixels")
    config = workdir / "config.yaml"
    settings = yaml.safe_load(config.read_text())
    settings["embedding"].update(num_workers=0, pixel_cache=False)
    config.write_text(yaml.safe_dump(settings))
    run_workflow(workdir, config, f"{STEM}/image.npy", "--cores", "2")
    assert "pixel cache off" in (workdir / LOG).read_text()
    stored = sorted(path.relative_to(demo_run) for path in (demo_run / STEM).rglob("*.npy"))
    assert len(stored) == 6
    for path in stored:
        assert (workdir / path).read_bytes() == (demo_run / path).read_bytes(), path


@pytest.mark.parametrize(
    ("jobs", "log_name", "models"),
    [("per_model", "tiny", ("tiny",)), ("single", "every-model", ("tiny", "tiny2"))],
)
def test_fewer_embed_jobs_load_each_model_once_with_the_same_bytes(
    demo_run: Path, tmp_path: Path, jobs: str, log_name: str, models: tuple[str, ...]
) -> None:
    """embedding.jobs: per_model (one job per model) and single (one job for every model), with
    a second benchmark (and for single a second model): one embed job, one load per model for
    both benchmarks, and the demo's matrices byte-identical to its own job's."""
    workdir = copy_of_run(demo_run, tmp_path)
    shutil.rmtree(workdir / "results" / "embeddings")
    config = workdir / "config.yaml"
    settings = yaml.safe_load(config.read_text())
    settings["embedding"]["jobs"] = jobs
    settings["benchmarks"]["other"] = {
        "protocol": "paired",
        "source": {"synthetic": {"pairs": 8, "seed": 5}},
        "k": [1, 5],
    }
    if "tiny2" in models:
        settings["models"]["tiny2"] = tiny_model(seed=1)
    config.write_text(yaml.safe_dump(settings))
    targets = [
        f"results/embeddings/{model}/{benchmark}/{modality}.npy"
        for model in models
        for benchmark in ("demo", "other")
        for modality in ("image", "text")
    ]
    result = run_workflow(workdir, config, *targets, "--cores", "2")
    output = result.stdout + result.stderr
    assert output.count("checkpoint embed:") == 1
    log = (workdir / "logs" / "embed" / f"{log_name}.log").read_text()
    assert log.count("model vlbench-tiny on ") == len(models)
    for model in models:
        assert f"{model} on other text: 1 shard(s), 0 reused" in log
    for modality in ("image", "text"):
        path = Path(STEM) / f"{modality}.npy"
        assert (workdir / path).read_bytes() == (demo_run / path).read_bytes(), path
    if "tiny2" in models:  # another seed: other numbers, in the second model's own files
        other = workdir / "results/embeddings/tiny2/demo/image.npy"
        assert other.read_bytes() != (demo_run / STEM / "image.npy").read_bytes()
    timings = workdir / "results" / "timings" / "embed"
    assert read_snakemake_benchmark(timings / f"{log_name}.tsv")["s"] > 0


def test_switching_the_job_shape_reuses_every_stored_shard(demo_run: Path, tmp_path: Path) -> None:
    """embedding.jobs changes no number: the new embed job (forced here: the demo's one pair
    makes the same job under every cut) reuses every shard the old job stored, loads no model,
    and leaves the gathered matrices as they were."""
    workdir = copy_of_run(demo_run, tmp_path)
    config = workdir / "config.yaml"
    settings = yaml.safe_load(config.read_text())
    settings["embedding"]["jobs"] = "per_benchmark"
    config.write_text(yaml.safe_dump(settings))
    matrices = {path: path.stat().st_mtime_ns for path in (workdir / STEM).glob("*.npy")}
    run_workflow(workdir, config, f"{STEM}/shards.json", "--forcerun", "embed", "--cores", "2")
    log = (workdir / "logs" / "embed" / "tiny" / "demo.log").read_text()
    assert "embed job (embedding.jobs: per_benchmark): 1 model(s) x 1 benchmark(s)" in log
    assert "tiny on demo image: 2 shard(s), 2 reused" in log
    assert "tiny on demo text: 2 shard(s), 2 reused" in log
    assert "model vlbench-tiny on " not in log  # every shard stored: no model loaded
    assert len(matrices) == 2
    assert all(path.stat().st_mtime_ns == mtime for path, mtime in matrices.items())
