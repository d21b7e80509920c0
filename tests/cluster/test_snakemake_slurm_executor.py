"""Snakemake + snakemake-executor-plugin-slurm submit and track real SLURM jobs.

Runs a throw-away 3-job workflow (two ``gpu=1`` shard jobs and one aggregate
job) through ``profiles/slurm-ci`` on the single-node test cluster, and checks
that every job ran as its own SLURM job (``$SLURM_JOB_ID`` written into the
outputs matches the ids Snakemake reports and ``squeue`` lists as COMPLETED).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from slurm_cluster import REPO_ROOT, SlurmCluster, report_job_ids

pytestmark = pytest.mark.slurm

PROFILE = REPO_ROOT / "profiles" / "slurm-ci"
SHARDS = (0, 1)

SNAKEFILE = """\
SHARDS = [0, 1]


rule all:
    input:
        "summary.txt",


rule gpu_shard:
    output:
        "shard_{i}.txt",
    resources:
        gpu=1,
    threads: 1
    shell:
        'echo "SLURM_JOB_ID=$SLURM_JOB_ID CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES" > {output};'
        " sleep 3"


rule summarize:
    input:
        expand("shard_{i}.txt", i=SHARDS),
    output:
        "summary.txt",
    shell:
        'echo "SLURM_JOB_ID=$SLURM_JOB_ID" > {output}; cat {input} >> {output}'
"""


def _snakemake_exe() -> str:
    exe = Path(sys.executable).with_name("snakemake")
    if exe.exists():
        return str(exe)
    found = shutil.which("snakemake")
    assert found, "snakemake executable not found (is the venv installed?)"
    return found


def _fields(path: Path) -> dict[str, str]:
    line = path.read_text().splitlines()[0]
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


@pytest.fixture
def throwaway_workflow(tmp_path: Path) -> Path:
    """A minimal workflow directory with a ``Snakefile``; returns the directory."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(SNAKEFILE)
    return workdir


def test_every_job_runs_as_a_slurm_job(
    slurm_cluster: SlurmCluster,
    throwaway_workflow: Path,
    record_property: Callable[[str, object], None],
) -> None:
    wf = throwaway_workflow
    proc = subprocess.run(
        [_snakemake_exe(), "--profile", str(PROFILE), "--directory", str(wf),
         "--snakefile", str(wf / "Snakefile")],
        capture_output=True, text=True, env=slurm_cluster.env, timeout=600, check=False,
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    (wf / "snakemake-run.log").write_text(log)
    assert proc.returncode == 0, f"snakemake failed:\n{log[-6000:]}\n{slurm_cluster.logs()}"

    # ids as reported by the executor plugin at submission time
    submitted = set(re.findall(r"submitted with SLURM jobid (\d+)", log))
    assert len(submitted) == len(SHARDS) + 1, log[-6000:]

    # ids as seen from inside the jobs
    outputs = {f"shard_{i}.txt": _fields(wf / f"shard_{i}.txt") for i in SHARDS}
    outputs["summary.txt"] = _fields(wf / "summary.txt")
    job_ids = {name: f.get("SLURM_JOB_ID", "") for name, f in outputs.items()}
    for name, job_id in job_ids.items():
        assert job_id.isdigit(), f"{name} was not produced inside a SLURM job: {outputs[name]}"
    assert set(job_ids.values()) == submitted, (job_ids, submitted)

    # GPU jobs got a (fake) GPU through --gpus=1
    for i in SHARDS:
        cvd = outputs[f"shard_{i}.txt"].get("CUDA_VISIBLE_DEVICES", "")
        assert cvd in {"0", "1"}, f"shard {i}: CUDA_VISIBLE_DEVICES={cvd!r}"

    # and SLURM itself knows them as completed jobs (squeue; no accounting DB)
    states = slurm_cluster.job_states(sorted(submitted))
    assert states == dict.fromkeys(submitted, "COMPLETED"), states

    summary = ", ".join(f"{name}={job_id}" for name, job_id in sorted(job_ids.items()))
    print(f"SLURM job ids: {summary}")
    (wf / "slurm_job_ids.txt").write_text(
        "".join(f"{name}\t{job_id}\n" for name, job_id in sorted(job_ids.items()))
    )
    record_property("slurm_job_ids", summary)
    report_job_ids("test_every_job_runs_as_a_slurm_job", summary)
