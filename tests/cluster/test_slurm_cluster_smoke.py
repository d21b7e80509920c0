"""Smoke test: the throw-away SLURM cluster runs two GPU jobs side by side."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster, report_job_ids

pytestmark = pytest.mark.slurm


def test_two_concurrent_gpu_jobs_get_distinct_devices(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    tmp_path.chmod(0o755)
    job_ids = []
    for i in range(2):
        job_ids.append(
            slurm_cluster.sbatch(
                "--gres=gpu:1",
                "--cpus-per-task=1",
                "--mem=200M",
                f"--job-name=smoke{i}",
                f"--output={tmp_path}/job{i}.out",
                "--wrap",
                'echo "CVD=$CUDA_VISIBLE_DEVICES JOB=$SLURM_JOB_ID START=$(date +%s.%N)"; sleep 5;'
                ' echo "END=$(date +%s.%N)"',
                cwd=tmp_path,
            )
        )
    print(f"submitted SLURM jobs {job_ids}")

    states = slurm_cluster.wait_jobs(job_ids, timeout=120)
    assert states == dict.fromkeys(job_ids, "COMPLETED"), states

    seen: dict[str, dict[str, str]] = {}
    for i, job_id in enumerate(job_ids):
        out = tmp_path / f"job{i}.out"
        assert out.exists(), f"job {job_id} wrote no output"
        fields = dict(kv.split("=", 1) for kv in out.read_text().split() if "=" in kv)
        assert fields.get("JOB") == job_id, out.read_text()
        assert fields.get("CVD"), f"job {job_id} saw no CUDA_VISIBLE_DEVICES: {out.read_text()}"
        seen[job_id] = fields

    devices = [f["CVD"] for f in seen.values()]
    assert len(set(devices)) == 2, f"jobs shared a GPU: {devices}"
    # they really overlapped in time (each holds its GPU for 5 s)
    (a, b) = seen.values()
    assert float(a["START"]) < float(b["END"]) and float(b["START"]) < float(a["END"]), seen
    report_job_ids(
        "test_two_concurrent_gpu_jobs_get_distinct_devices",
        ", ".join(
            f"sbatch job {job_id} (CUDA_VISIBLE_DEVICES={f['CVD']})" for job_id, f in seen.items()
        ),
    )
