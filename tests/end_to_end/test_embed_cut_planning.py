"""The embedding cut each kind of run plans and prints (embedding.jobs: auto, the default).

Real plans of the shared demo's config with two models: a run on one machine, one with two GPU
slots, and one that submits its jobs to SLURM (the executor plugin plans without a cluster in a
dry run). The SLURM tests check that the cluster jobs plan the cut their host printed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rerun_matrix_support import jobs_in_log
from workflow_helpers import run_workflow, shared_demo, tiny_model, write_config, write_shared_demo

SITUATIONS = {
    "one machine": ((), "single", {"embed"}),
    "one machine, two GPU slots": (
        ("--resources", "gpu=2"),
        "per_model",
        {"embed[model=tiny]", "embed[model=tiny2]"},
    ),
    "SLURM": (
        ("--executor", "slurm", "--jobs", "4"),
        "per_benchmark",
        {"embed[benchmark=demo,model=tiny]", "embed[benchmark=demo,model=tiny2]"},
    ),
}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("cut")
    write_shared_demo(directory)
    config = shared_demo()
    config["models"]["tiny2"] = tiny_model(seed=1)
    write_config(directory, config)
    return directory


@pytest.mark.parametrize("situation", list(SITUATIONS))
def test_the_run_prints_and_plans_the_cut_for_where_its_jobs_run(
    workdir: Path, situation: str
) -> None:
    extra, cut, embed_jobs = SITUATIONS[situation]
    result = run_workflow(workdir, workdir / "config.yaml", "--dry-run", *extra)
    assert f"vlbench embedding jobs: {cut} (auto: " in result.stdout + result.stderr
    jobs = jobs_in_log(result.stdout)
    assert {job for job in jobs if job.split("[")[0] == "embed"} == embed_jobs
    # Whatever the cut, one gather per (model, benchmark).
    gathers = {job for job in jobs if job.startswith("gather_embeddings")}
    assert gathers == {f"gather_embeddings[benchmark=demo,model={m}]" for m in ("tiny", "tiny2")}


def test_an_explicit_cut_wins_over_where_the_jobs_run(workdir: Path) -> None:
    result = run_workflow(
        workdir,
        workdir / "config.yaml",
        "--dry-run",
        "--executor",
        "slurm",
        "--jobs",
        "4",
        "--config",
        "embedding={jobs: single, shard_size: 20}",
    )
    assert "vlbench embedding jobs: single (embedding.jobs)" in result.stdout + result.stderr
    assert {job for job in jobs_in_log(result.stdout) if job.split("[")[0] == "embed"} == {"embed"}
