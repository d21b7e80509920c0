"""The workflow's embedding stage end to end: shard plan, shard jobs, gather, resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[2]
STEM = "results/embeddings/tiny-random/synth"
CONFIG = f"""
models:
  tiny-random:
    name: vlbench-tiny
    model_config: {REPO / "config" / "models" / "vlbench-tiny.json"}
    random_init_seed: 0
benchmarks:
  synth:
    protocol: paired
    source:
      synthetic: {{pairs: 24, seed: 3}}
embedding:
  batch_size: 8
  shard_size: 12
"""
TARGETS = [f"{STEM}/image.npy", f"{STEM}/text.npy"]


def snakemake(workdir: Path, *extra: str) -> None:
    command = [
        str(Path(sys.executable).parent / "snakemake"),
        *TARGETS,
        *extra,
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(workdir / "config.yaml"),
        "--cores",
        "2",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("workflow")
    (directory / "config.yaml").write_text(CONFIG, encoding="utf-8")
    snakemake(directory)
    return directory


def test_gathered_matrix_is_the_shards_in_order(workdir: Path) -> None:
    for modality in ("image", "text"):
        shards = sorted((workdir / STEM / modality).glob("shard-*.npy"))
        assert [path.name for path in shards] == ["shard-00000.npy", "shard-00001.npy"]
        gathered = np.load(workdir / STEM / f"{modality}.npy", allow_pickle=False)
        assert np.array_equal(gathered, np.concatenate([np.load(path) for path in shards]))
        ids = pq.read_table(workdir / STEM / f"{modality}.ids.parquet").column("id").to_pylist()
        assert ids == [str(row) for row in range(24)]


def test_provenance_lists_every_shard_with_its_timing(workdir: Path) -> None:
    record = json.loads((workdir / STEM / "image.json").read_text())
    assert record["rows"] == 24
    assert [shard["rows"] for shard in record["shards"]] == [[0, 12], [12, 24]]
    for shard in record["shards"]:
        assert shard["snakemake_benchmark"]["max_rss"] > 0
        assert shard["pixel_cache"].startswith("miss")
    assert len(list((workdir / "results" / "pixels" / "synth").glob("*/rows-*.npy"))) == 2


def test_rerun_after_a_kill_recomputes_only_the_missing_shard(workdir: Path) -> None:
    """A job killed mid-shard leaves no shard file (atomic writes) and no gathered matrix."""
    kept = workdir / STEM / "image" / "shard-00000.npy"
    lost = workdir / STEM / "image" / "shard-00001.npy"
    before = np.load(workdir / STEM / "image.npy")
    kept_mtime = kept.stat().st_mtime_ns
    for path in (lost, workdir / STEM / "image.npy"):
        path.unlink()
    snakemake(workdir)
    assert kept.stat().st_mtime_ns == kept_mtime
    assert lost.is_file()
    assert np.array_equal(np.load(workdir / STEM / "image.npy"), before)
    log = workdir / "logs" / "embed_shard" / "tiny-random" / "synth" / "image" / "shard-00001.log"
    assert "pixel cache hit" in log.read_text()
