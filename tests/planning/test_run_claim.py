"""A dead run's Snakemake locks are removed only when no live run holds the directory."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

CLAIM = "from vlbench.planning.run_claim import claim_directory; print(claim_directory('{dir}'))"


def claim_in_new_process(folder: Path) -> str:
    """What a fresh process's claim removed (its printed list)."""
    code = CLAIM.format(dir=folder)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout


def test_stale_locks_are_removed_only_when_no_run_is_alive(tmp_path: Path) -> None:
    folder = tmp_path / ".snakemake"
    locks = folder / "locks"
    locks.mkdir(parents=True)
    for name in ("0.input.lock", "0.output.lock"):
        (locks / name).write_text("results/x\n")
    # A live run holds the claim (here: a process that took it and sleeps).
    live = subprocess.Popen(
        [sys.executable, "-c", CLAIM.format(dir=folder) + "; import time; time.sleep(30)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (folder / "vlbench-run.lock").exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)  # past its flock: it has printed what it removed
        assert claim_in_new_process(folder) == "[]\n"  # another run lives: touch nothing
    finally:
        live.kill()
        live.wait()
    # The live process removed the files it found when it started (no run held the claim).
    assert not any(locks.iterdir())
    (locks / "1.output.lock").write_text("results/y\n")  # left by the run that was killed
    removed = claim_in_new_process(folder)
    assert "1.output.lock, a lock of an earlier run that did not end" in removed
    assert not any(locks.iterdir())
