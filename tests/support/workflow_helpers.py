"""Test helpers: repository paths, config builders and a workflow runner for temporary dirs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from vlbench.config import validate_config

REPO = Path(__file__).resolve().parents[2]
SNAKEFILE = REPO / "Snakefile"
TINY_MODEL_CONFIG = REPO / "config" / "models" / "vlbench-tiny.json"
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
SHIPPED_REFERENCE = REPO / "config" / "reference" / "published_results.csv"
SHIPPED_MAP = REPO / "config" / "reference" / "map.yaml"


def validate(config: dict[str, Any], source: str = "config") -> dict[str, Any]:
    """The workflow's config validation, against the repository's schema."""
    return validate_config(config, source, SCHEMA)


def tiny_model(seed: int = 0) -> dict[str, Any]:
    """A model entry for the tiny random-weight architecture."""
    return {
        "name": "vlbench-tiny",
        "model_config": str(TINY_MODEL_CONFIG),
        "random_init_seed": seed,
    }


def synthetic_benchmark(
    pairs: int = 40, seed: int = 0, k: list[int] | None = None
) -> dict[str, Any]:
    """A benchmark entry for a synthetic BioMedFlickr-layout source."""
    return {
        "protocol": "paired",
        "source": {"synthetic": {"pairs": pairs, "seed": seed}},
        "k": k or [1, 5, 10],
    }


def write_config(directory: Path, config: dict[str, Any], name: str = "config.yaml") -> Path:
    """Write a config file into `directory` and return its path."""
    path = directory / name
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def run_workflow(
    workdir: Path, configfile: Path, *extra: str, check: bool = True
) -> subprocess.CompletedProcess:
    """Run snakemake on the project's Snakefile inside `workdir`."""
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(SNAKEFILE),
        "--directory",
        str(workdir),
        "--configfile",
        str(configfile),
        "--cores",
        "1",
        *extra,
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=workdir)
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


def small_demo() -> dict[str, Any]:
    """The demo's shape at test size: tiny random model, 30 synthetic pairs, two shards."""
    return {
        "models": {"tiny": tiny_model()},
        "benchmarks": {"demo": synthetic_benchmark(30, k=[1, 5, 10])},
        "embedding": {"shard_size": 16},
        "tables": {"qualitative_queries": 0},
    }


def run_in_own_session(
    workdir: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run the workflow on workdir/config.yaml in its own process group (killable as a whole)."""
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--cores", "2"]
    command += ["--directory", str(workdir), "--configfile", str(workdir / "config.yaml"), *extra]
    return subprocess.run(
        command,
        cwd=workdir,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
