"""Give each concurrent local GPU job its own device, through one lock file per GPU.

Snakemake's `--resources gpu=N` only counts GPU jobs; it does not tell a job *which* GPU to use
and sets no CUDA_VISIBLE_DEVICES when it runs jobs locally. A job calls `claim_gpu()` before it
touches CUDA. Then:

* CUDA_VISIBLE_DEVICES already names exactly one device, or the job runs inside a SLURM
  allocation (SLURM_JOB_ID set): the job uses what it was given; nothing is locked.
* CUDA_VISIBLE_DEVICES is unset or names several devices: the job takes an exclusive
  `fcntl.flock` on the lock file of the first free device in `<lock_dir>/<host>/` and narrows
  CUDA_VISIBLE_DEVICES to that device, so the job sees it as `cuda:0`. The lock is held until
  the process exits (the kernel drops it even when the job is killed), so at most one job per
  GPU runs while `--resources gpu=N` admits at most N GPU jobs at once.
* No GPU is visible: nothing happens and the job runs on the CPU.

Counting devices goes through `torch.cuda.device_count()`, which asks NVML and does not
initialise CUDA, so narrowing CUDA_VISIBLE_DEVICES afterwards still takes effect.
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
import time
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from vlbench.errors import VlbenchError
from vlbench.paths import GPU_LOCK_DIR

DEFAULT_LOCK_DIR = GPU_LOCK_DIR
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"

# Lock files held by this process; kept referenced so the locks live as long as the process.
_HELD: list[IO[bytes]] = []


@dataclass(frozen=True)
class GpuClaim:
    """What a job got: the CUDA_VISIBLE_DEVICES value it runs with, and how it got it."""

    visible_devices: str | None
    how: str
    lock_path: Path | None = None

    def describe(self) -> str:
        """One line for the job's log."""
        where = f" (lock {self.lock_path})" if self.lock_path else ""
        return f"GPU claim: {self.how}; {VISIBLE_DEVICES}={self.visible_devices}{where}"


def parse_visible_devices(value: str) -> list[str]:
    """Device entries of a CUDA_VISIBLE_DEVICES value: indices, GPU-/MIG- UUIDs."""
    return [part.strip() for part in value.split(",") if part.strip()]


def _torch_device_count() -> int:
    import torch

    return torch.cuda.device_count()


def candidate_devices(
    environ: MutableMapping[str, str], device_count: Callable[[], int]
) -> list[str]:
    """The devices a local job may claim: those CUDA_VISIBLE_DEVICES lists, else 0..N-1."""
    given = environ.get(VISIBLE_DEVICES)
    if given is not None:
        return parse_visible_devices(given)
    return [str(index) for index in range(device_count())]


def _try_lock(path: Path) -> IO[bytes] | None:
    handle = open(path, "ab")  # noqa: SIM115 - kept open while the lock is held
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    except OSError as exc:
        handle.close()
        raise VlbenchError(f"{path}: cannot lock GPU slot ({exc})") from exc
    return handle


def lock_free_device(
    devices: Sequence[str], lock_dir: Path, timeout_s: float | None, poll_s: float
) -> tuple[str, Path, IO[bytes]]:
    """Lock the first device whose lock file nobody holds; wait while all are taken."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        for device in devices:
            path = lock_dir / f"gpu-{device}.lock"
            handle = _try_lock(path)
            if handle is not None:
                return device, path, handle
        if deadline is not None and time.monotonic() >= deadline:
            raise VlbenchError(
                f"{lock_dir}: all {len(devices)} GPUs ({','.join(devices)}) stayed claimed for "
                f"{timeout_s:g} s; run with --resources gpu=N where N is the number of GPUs"
            )
        time.sleep(poll_s)


def _require_cuda_uninitialised() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise RuntimeError("claim_gpu() must run before CUDA is initialised in this process")


def claim_gpu(
    lock_dir: str | Path = DEFAULT_LOCK_DIR,
    *,
    environ: MutableMapping[str, str] | None = None,
    device_count: Callable[[], int] = _torch_device_count,
    timeout_s: float | None = None,
    poll_s: float = 0.5,
) -> GpuClaim:
    """Pick this job's GPU before CUDA is initialised; see the module docstring for the rules.

    `environ` (default `os.environ`) is updated in place when a device is claimed.
    """
    env = os.environ if environ is None else environ
    given = env.get(VISIBLE_DEVICES)
    if env.get("SLURM_JOB_ID"):
        return GpuClaim(given, "given by SLURM job " + env["SLURM_JOB_ID"])
    devices = candidate_devices(env, device_count)
    if not devices:
        return GpuClaim(given, "no GPU visible, running on the CPU")
    if len(devices) == 1 and given is not None:
        return GpuClaim(given, "one device given in the environment")
    _require_cuda_uninitialised()
    host_dir = Path(lock_dir) / socket.gethostname()
    device, path, handle = lock_free_device(devices, host_dir, timeout_s, poll_s)
    _HELD.append(handle)
    env[VISIBLE_DEVICES] = device
    return GpuClaim(device, f"claimed 1 of {len(devices)} local GPUs", path)


def release_all() -> None:
    """Drop every lock this process holds (normally the process exit does this)."""
    while _HELD:
        _HELD.pop().close()
