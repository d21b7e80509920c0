"""Test helpers: repository paths, config builders and a workflow runner for temporary dirs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from vlbench.config import validate_config

REPO = Path(__file__).resolve().parents[2]
SNAKEFILE = REPO / "Snakefile"
FORKED_SNAKEMAKE = Path(__file__).with_name("forked_snakemake.py")
# How the tests start Snakemake; its arguments follow (`snakemake_command`).
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
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


def snakemake_command(
    workdir: Path,
    *extra: str,
    configfile: Path | None = None,
    config: Sequence[str] = (),
    cores: int | None = 2,
) -> list[str]:
    """The one spelling of a Snakemake run of the project's Snakefile in `workdir`, on its
    config.yaml unless `configfile` is given; `config` are `--config` items, `cores` None leaves
    `--cores` to a profile. Targets and options go in `extra`, after `--cores`, which ends the
    list-valued `--configfile` and `--config`."""
    command = [*SNAKEMAKE, "--snakefile", str(SNAKEFILE)]
    command += ["--directory", str(workdir)]
    command += ["--configfile", str(configfile or workdir / "config.yaml")]
    if config:
        command += ["--config", *config]
    if cores is not None:
        command += ["--cores", str(cores)]
    return [*command, *extra]


def run_workflow(
    workdir: Path, configfile: Path, *extra: str, check: bool = True
) -> subprocess.CompletedProcess:
    """Run snakemake on the project's Snakefile inside `workdir` (one core unless `extra` says
    otherwise: a later `--cores` wins)."""
    command = snakemake_command(workdir, *extra, configfile=configfile, cores=1)
    result = subprocess.run(command, capture_output=True, text=True, cwd=workdir)
    return succeeded(result) if check else result


def succeeded(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """`result` of a Snakemake run, which must have exited 0 (else the ends of its output)."""
    if result.returncode != 0:
        raise AssertionError(f"snakemake failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


def dry_runs(workdirs: Sequence[Path], *extra: str) -> list[subprocess.CompletedProcess]:
    """`run_workflow(workdir, workdir/config.yaml, "--dry-run", *extra, check=False)` for each
    workdir, as forked children of one process that imports Snakemake once
    (forked_snakemake.py)."""
    commands = [snakemake_command(w, "--dry-run", *extra, cores=1) for w in workdirs]
    with tempfile.TemporaryDirectory(prefix="dry-runs-") as folder:
        runs = [
            {
                "argv": command[len(SNAKEMAKE) :],
                "cwd": str(workdir),
                "stdout": str(Path(folder, f"{number}.out")),
                "stderr": str(Path(folder, f"{number}.err")),
            }
            for number, (command, workdir) in enumerate(zip(commands, workdirs, strict=True))
        ]
        forked = subprocess.run(
            [sys.executable, str(FORKED_SNAKEMAKE), str(REPO)],
            input=json.dumps(runs),
            capture_output=True,
            text=True,
            check=True,
        )
        codes = json.loads(forked.stdout)
        return [
            subprocess.CompletedProcess(
                command, code, Path(run["stdout"]).read_text(), Path(run["stderr"]).read_text()
            )
            for command, code, run in zip(commands, codes, runs, strict=True)
        ]


# A paper-table map for the shared run: its benchmark stands for BioMedFlickr, without the
# published numbers (the data is synthetic).
DEMO_MAP = "models: {}\nbenchmarks:\n  demo: {reference: biomedflickr, published: false}\n"


def shared_demo() -> dict[str, Any]:
    """The demo's shape at test size, shared by every test that reads a finished run.

    Tiny random model, 40 synthetic pairs in two shards per modality (per-shard resume, four
    GPU jobs on the SLURM cluster), two qualitative queries, a paper table through DEMO_MAP.
    The keys differ from the default config's, so a leak of config/config.yaml would show.
    """
    return {
        "models": {"tiny": tiny_model()},
        "benchmarks": {"demo": synthetic_benchmark(40, k=[1, 5, 10])},
        "embedding": {"shard_size": 20},
        "tables": {"qualitative_queries": 2, "map": "paper-map.yaml"},
    }


def write_shared_demo(directory: Path) -> Path:
    """Write the shared demo's config (and its paper-table map) into `directory`."""
    (directory / "paper-map.yaml").write_text(DEMO_MAP, encoding="utf-8")
    return write_config(directory, shared_demo())


def run_in_own_session(
    workdir: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run the workflow on workdir/config.yaml in its own process group (killable as a whole)."""
    return subprocess.run(
        snakemake_command(workdir, *extra),
        cwd=workdir,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )


# Runs a command as a child subreaper (Linux prctl PR_SET_CHILD_SUBREAPER): every process the
# command leaves behind, daemons that detach into their own session included, becomes this
# process's child when its parent exits. After the command, those still alive are written to
# the JSON file named first (pid and command line), then killed, so nothing outlives the test.
WATCH_PROCESSES = """
import ctypes, json, os, signal, subprocess, sys
PR_SET_CHILD_SUBREAPER = 36
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit("cannot become a child subreaper")
code = subprocess.run(sys.argv[2:]).returncode
left = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        command = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode()
    except OSError:
        continue
    if int(stat[1]) == os.getpid() and stat[0] != "Z":
        left.append({"pid": int(pid), "command": command.strip()})
for process in left:
    os.kill(process["pid"], signal.SIGKILL)
with open(sys.argv[1], "w") as out:
    json.dump(left, out)
sys.exit(code)
"""


def watch_processes(command: list[str], leftovers: Path, cwd: Path) -> subprocess.CompletedProcess:
    """Run `command` in its own session, recording in `leftovers` (a JSON list) every process
    it left alive (then killed)."""
    return subprocess.run(
        [sys.executable, "-c", WATCH_PROCESSES, str(leftovers), *command],
        cwd=cwd,
        capture_output=True,
        text=True,
        start_new_session=True,
    )


def run_watching_processes(
    workdir: Path, leftovers: Path, *extra: str
) -> subprocess.CompletedProcess:
    """`run_in_own_session`, recording in `leftovers` (JSON) every process the run left alive."""
    return watch_processes(snakemake_command(workdir, *extra), leftovers, workdir)


def copy_of_run(run: Path, tmp_path: Path) -> Path:
    """A copy of a finished run, modification times included (to the nanosecond)."""
    copy = tmp_path / "run"
    shutil.copytree(run, copy, symlinks=True)
    return copy
