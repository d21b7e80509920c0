"""GPU slot claiming on a simulated multi-GPU box: concurrent local jobs never share a device."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vlbench.embedding import gpu_slots
from vlbench.embedding.gpu_slots import claim_gpu
from vlbench.errors import VlbenchError

# A job process: claims with N simulated GPUs, prints what it got, holds it until `release` exists.
JOB = """
import sys, time
from pathlib import Path
from vlbench.embedding.gpu_slots import claim_gpu
lock_dir, n_devices, release = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
claim = claim_gpu(lock_dir, device_count=lambda: n_devices, poll_s=0.05)
print(claim.visible_devices, flush=True)
while not release.exists():
    time.sleep(0.05)
"""


@pytest.fixture(autouse=True)
def _drop_locks() -> Iterator[None]:
    yield
    gpu_slots.release_all()


def start_job(lock_dir: Path, n_devices: int, release: Path) -> subprocess.Popen[str]:
    env = {key: value for key, value in os.environ.items() if key != "SLURM_JOB_ID"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.Popen(
        [sys.executable, "-c", JOB, str(lock_dir), str(n_devices), str(release)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def first_line(job: subprocess.Popen[str]) -> str:
    assert job.stdout is not None
    return job.stdout.readline().strip()


def test_concurrent_jobs_get_distinct_devices(tmp_path: Path) -> None:
    release = tmp_path / "release"
    jobs = [start_job(tmp_path / "locks", 3, release) for _ in range(3)]
    try:
        devices = [first_line(job) for job in jobs]
    finally:
        release.touch()
        for job in jobs:
            job.wait(timeout=30)
    assert sorted(devices) == ["0", "1", "2"]


def test_a_fourth_job_waits_until_a_gpu_is_free_even_after_a_kill(tmp_path: Path) -> None:
    lock_dir, release = tmp_path / "locks", tmp_path / "release"
    holders = [start_job(lock_dir, 2, release) for _ in range(2)]
    try:
        held = {first_line(job): job for job in holders}
        assert set(held) == {"0", "1"}
        with pytest.raises(VlbenchError, match="stayed claimed"):
            claim_gpu(lock_dir, environ={}, device_count=lambda: 2, timeout_s=0.3, poll_s=0.05)
        held["1"].send_signal(signal.SIGKILL)
        held["1"].wait(timeout=30)
        environ: dict[str, str] = {}
        claim = claim_gpu(lock_dir, environ=environ, device_count=lambda: 2, timeout_s=10)
        assert claim.visible_devices == "1" and environ["CUDA_VISIBLE_DEVICES"] == "1"
    finally:
        release.touch()
        for job in holders:
            job.wait(timeout=30)


def test_claims_only_among_the_devices_already_listed(tmp_path: Path) -> None:
    listed = {"CUDA_VISIBLE_DEVICES": "5,GPU-abc"}
    first, second, third = dict(listed), dict(listed), dict(listed)
    claims = [
        claim_gpu(tmp_path, environ=env, device_count=lambda: 8, timeout_s=0)
        for env in (first, second)
    ]
    assert {first["CUDA_VISIBLE_DEVICES"], second["CUDA_VISIBLE_DEVICES"]} == {"5", "GPU-abc"}
    assert all(claim.lock_path is not None for claim in claims)
    assert claims[0].lock_path.parent == tmp_path / socket.gethostname()
    with pytest.raises(VlbenchError, match="5,GPU-abc"):
        claim_gpu(tmp_path, environ=third, device_count=lambda: 8, timeout_s=0)


def test_a_released_slot_is_claimed_again(tmp_path: Path) -> None:
    claim_gpu(tmp_path, environ={}, device_count=lambda: 1, timeout_s=0)
    gpu_slots.release_all()
    assert (
        claim_gpu(tmp_path, environ={}, device_count=lambda: 1, timeout_s=0).visible_devices == "0"
    )


def fails_if_called() -> int:
    raise AssertionError("devices must not be counted here")


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"SLURM_JOB_ID": "17", "CUDA_VISIBLE_DEVICES": "1"}, "1"),
        ({"SLURM_JOB_ID": "17", "CUDA_VISIBLE_DEVICES": "0,1"}, "0,1"),
        ({"CUDA_VISIBLE_DEVICES": "3"}, "3"),
    ],
)
def test_given_devices_are_used_as_given(
    tmp_path: Path, environ: dict[str, str], expected: str
) -> None:
    before = dict(environ)
    claim = claim_gpu(tmp_path, environ=environ, device_count=fails_if_called)
    assert claim.visible_devices == expected
    assert claim.lock_path is None
    assert environ == before
    assert not any(tmp_path.iterdir()), "no lock file may be created"


def test_without_gpus_nothing_is_claimed(tmp_path: Path) -> None:
    environ: dict[str, str] = {}
    claim = claim_gpu(tmp_path, environ=environ, device_count=lambda: 0)
    assert claim.visible_devices is None and claim.lock_path is None
    assert environ == {}
    assert "CPU" in claim.describe()


def test_waiting_job_takes_the_slot_as_soon_as_it_is_freed(tmp_path: Path) -> None:
    lock_dir, release = tmp_path / "locks", tmp_path / "release"
    holder = start_job(lock_dir, 1, release)
    try:
        assert first_line(holder) == "0"
        waiter = start_job(lock_dir, 1, tmp_path / "release-waiter")
        time.sleep(0.5)
        assert waiter.poll() is None
        release.touch()
        assert first_line(waiter) == "0"
    finally:
        release.touch()
        (tmp_path / "release-waiter").touch()
        holder.wait(timeout=30)
        waiter.wait(timeout=30)
