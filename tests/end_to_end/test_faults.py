"""Killed and interrupted workflows: SIGKILL at a few points, or Ctrl-C in the middle of the
embedding, then the same command gives the clean run's bytes.

Each case sets VLBENCH_CRASH_BEFORE (see vlbench.atomic) so that the whole process group,
Snakemake and every running job, dies just before one output would be renamed into place.
The resumed run is compared file by file with the shared clean run, so these cases also show
that two runs on the CPU give byte-identical embeddings, ranks and tables.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from stored_files import files_under
from workflow_helpers import (
    copy_of_run,
    run_in_own_session,
    snakemake_command,
    write_shared_demo,
)

from vlbench.atomic import CRASH_ENV
from vlbench.planning.run_end import INTERRUPTED

# Whole-workflow kills at three points: an embedding shard (the GPU job, resumed per shard), a
# rank file (the evaluation job, several inputs and outputs) and the final table. Each run starts
# from a copy of the shared clean run with the rule of the killed job forced (Snakemake removes
# that job's outputs before it starts; the embedding job's stored shards, which it would reuse,
# are removed too), so it and every job after it run again. Every kind of atomic write is also
# killed before its rename in a fast unit test (tests/test_atomic.py, CRASH_SITES).
CRASH_POINTS = {
    "*/results/embeddings/*/shards/text/shard-00001.npy": "embed",
    "*/results/ranks/*/image_to_text.parquet": "evaluate_paired",
    "*/results/tables/metrics.csv": "tables",
}


def forced_copy(demo_run: Path, tmp_path: Path, rule: str) -> tuple[Path, list[str]]:
    """A copy of the shared clean run, and the options that run `rule`'s jobs again from
    scratch (the embedding job without its stored shards)."""
    workdir = copy_of_run(demo_run, tmp_path)
    if rule == "embed":
        for shards in (workdir / "results" / "embeddings").glob("*/*/shards"):
            shutil.rmtree(shards)
    return workdir, ["--forcerun", rule]


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_killed_run_resumes_to_the_clean_runs_bytes(
    point: str, demo_run: Path, tmp_path: Path
) -> None:
    workdir, forced = forced_copy(demo_run, tmp_path, CRASH_POINTS[point])
    killed = run_in_own_session(workdir, *forced, env={CRASH_ENV: point})
    assert killed.returncode == -signal.SIGKILL, (
        f"the crash point {point} was never reached:\n{killed.stderr[-2000:]}"
    )
    # SIGKILL leaves Snakemake's lock behind; no run holds the directory any more, so the next
    # invocation removes it, saying so (a dry run too: the files guard nothing now).
    assert any((workdir / ".snakemake" / "locks").glob("*.lock"))
    # Nothing the killed jobs left counts as finished: a plain dry run still has work to do.
    plain = run_in_own_session(workdir, "--dry-run")
    output = plain.stdout + plain.stderr
    assert plain.returncode == 0 and "Nothing to be done" not in output
    assert "a lock of an earlier run that did not end" in output
    # The same command resumes (the default profile reruns the incomplete jobs).
    resumed = run_in_own_session(workdir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_same_files_as_the_clean_run(demo_run, workdir, f"a kill at {point}")


def assert_same_files_as_the_clean_run(demo_run: Path, workdir: Path, after: str) -> None:
    clean, resumed = files_under(demo_run), files_under(workdir)
    assert any(name.endswith(".npy") for name in clean)
    assert any(name.endswith("metrics.csv") for name in clean)
    assert sorted(resumed) == sorted(clean)
    different = [name for name in clean if clean[name] != resumed[name]]
    assert not different, f"differ from the clean run after {after}: {different}"
    # Every partial a killed writer left was swept by the writer of the same output.
    assert list((workdir / "results").rglob("*.partial")) == []


def running_script(workdir: Path, name: str) -> bool:
    """True while a rule script `name` of the run in `workdir` is running."""
    scripts = str(workdir / ".snakemake" / "scripts")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if scripts in command and command.rstrip("\0").endswith(name):
            return True
    return False


def test_ctrl_c_mid_embedding_stops_with_one_line_and_the_same_command_resumes(
    demo_run: Path, tmp_path: Path
) -> None:
    workdir, forced = forced_copy(demo_run, tmp_path, "embed")
    (workdir / "results" / "tables" / "metrics.csv").unlink()  # made again only after the embedding
    run = subprocess.Popen(
        snakemake_command(workdir, *forced),
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not running_script(workdir, ".embed.py"):
            assert run.poll() is None, "the run ended before its embedding job"
            assert time.monotonic() < deadline, "the embedding job never started"
            time.sleep(0.1)
        time.sleep(0.5)  # inside the job: its imports, the model
        # What a terminal does on Ctrl-C: SIGINT to every process of the foreground group.
        os.killpg(run.pid, signal.SIGINT)
        stdout, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    output = stdout + stderr
    assert run.returncode == 130, output[-3000:]
    assert stderr.strip().splitlines()[-1] == INTERRUPTED
    assert output.count(INTERRUPTED) == 1
    for noise in ("Traceback", "KeyboardInterrupt", "Error in rule", "did not complete"):
        assert noise not in output, output[-3000:]
    assert not (workdir / "results" / "tables" / "metrics.csv").exists()  # it stopped there
    resumed = run_in_own_session(workdir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_same_files_as_the_clean_run(demo_run, workdir, "Ctrl-C in the embedding")


def test_second_invocation_on_the_same_directory_fails_fast(tmp_path: Path) -> None:
    workdir = tmp_path / "run"
    workdir.mkdir()
    write_shared_demo(workdir)
    # The first run only goes as far as the image embeddings: long enough to hold the lock.
    command = snakemake_command(workdir, cores=1)
    target = "results/embeddings/tiny/demo/image.npy"
    first = subprocess.Popen(
        [*command, target],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        locks = workdir / ".snakemake" / "locks"
        deadline = time.monotonic() + 120
        while not (locks.exists() and any(locks.iterdir())):
            assert first.poll() is None, "the first run ended before taking its lock"
            assert time.monotonic() < deadline, "the first run never took its lock"
            time.sleep(0.2)
        started = time.monotonic()
        second = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
        assert second.returncode != 0
        # Snakemake refuses at its lock or, while the first run has a job in flight, already
        # at that job's outputs (marked incomplete); neither touches the first run's files.
        said = (second.stdout + second.stderr).lower()
        assert "cannot be locked" in said or "incomplete files" in said, said[-2000:]
        # Following the advice to rerun incomplete jobs still stops at the lock.
        forced = subprocess.run(
            [*command, "--rerun-incomplete"], cwd=workdir, capture_output=True, text=True
        )
        assert forced.returncode != 0
        assert "cannot be locked" in (forced.stdout + forced.stderr).lower()
        assert time.monotonic() - started < 60
    finally:
        first.wait(timeout=600)
    assert first.returncode == 0
    assert (workdir / target).is_file()
