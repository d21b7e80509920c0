"""The vlbench workflow through profiles/slurm-ci on a real single-node SLURM cluster.

One run of the shared demo config with a second model (synthetic benchmark, seeded random
weights: two GPU jobs, each embedding every shard of both modalities for one model, on the
cluster's two fake GPUs at once) checks that

* every job outside the workflow's `localrules` was submitted with sbatch, finished COMPLETED in
  SLURM and ran its rule inside the allocation (the job's own SLURM log), while the declared light
  rules ran on the submitting host;
* GPU jobs whose SLURM allocations overlapped in time saw different CUDA_VISIBLE_DEVICES
  (recorded inside the job, in each shard's provenance and the rule log);
* the rows of results/tables/metrics.csv of the shared model equal those of the shared local
  run of the demo config.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from slurm_cluster import REPO_ROOT, SlurmCluster, report_job_ids
from workflow_helpers import (
    shared_demo,
    snakemake_command,
    tiny_model,
    write_config,
    write_shared_demo,
)

pytestmark = pytest.mark.slurm

PROFILE = REPO_ROOT / "profiles" / "slurm-ci"
COMMON_SMK = REPO_ROOT / "workflow" / "rules" / "common.smk"

JOB_HEADER = re.compile(r"^(local)?(rule|checkpoint) (\w+):$")
SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+) \(log: (.+?)\)\.$")
VISIBLE = re.compile(r"CUDA_VISIBLE_DEVICES=([^\s),;]+)")


@dataclass
class PlannedJob:
    """One job as the submitting Snakemake printed it."""

    rule: str
    local: bool
    jobid: str
    fields: dict[str, str] = field(default_factory=dict)

    def files(self, key: str) -> list[str]:
        return [part.strip() for part in self.fields.get(key, "").split(",") if part.strip()]

    @property
    def uses_gpu(self) -> bool:
        return re.search(r"\bgpu=[1-9]", self.fields.get("resources", "")) is not None


def parse_jobs(log: str) -> list[PlannedJob]:
    """The job blocks (`rule x:` / `localrule x:` and their indented fields) of a Snakemake log."""
    jobs: list[PlannedJob] = []
    current: PlannedJob | None = None
    for line in log.splitlines():
        header = JOB_HEADER.match(line)
        if header:
            current = PlannedJob(header.group(3), header.group(1) == "local", "")
            jobs.append(current)
        elif current is not None and line.startswith("    ") and ": " in line:
            key, value = line.strip().split(": ", 1)
            current.fields[key] = value
            if key == "jobid":
                current.jobid = value
        else:
            current = None
    return jobs


def declared_localrules() -> set[str]:
    """The rule names of the workflow's `localrules:` directive."""
    match = re.search(r"^localrules:(.*(?:\n[ \t]+.*)*)", COMMON_SMK.read_text(), re.MULTILINE)
    assert match, f"no localrules directive in {COMMON_SMK}"
    return {name.strip() for name in match.group(1).replace("\n", ",").split(",") if name.strip()}


def snakemake(workdir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    command = snakemake_command(workdir, *args, cores=None)
    log = open(workdir / "snakemake.log", "w")  # noqa: SIM115 - closed by the child's exit
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=workdir, env=env)


def finish(process: subprocess.Popen, workdir: Path, what: str) -> str:
    process.wait(timeout=900)
    log = (workdir / "snakemake.log").read_text()
    assert process.returncode == 0, f"{what} failed:\n{log[-8000:]}"
    return log


def visible_devices_seen(workdir: Path, job: PlannedJob, slurm_id: str) -> set[str]:
    """CUDA_VISIBLE_DEVICES as recorded inside the job: provenance JSON and rule log lines."""
    seen: set[str] = set()
    for output in job.files("output"):
        if output.endswith(".json") and (workdir / output).is_file():
            record = json.loads((workdir / output).read_text())
            # An embed job's list of stored shards records where each shard ran.
            listed = record.get("modalities", {}).values()
            for shard in [entry["record"] for entries in listed for entry in entries] or [record]:
                if "cuda_visible_devices" in shard:
                    assert shard.get("slurm_job_id") == slurm_id, (output, shard)
                    seen.add(str(shard["cuda_visible_devices"]))
    for log in job.files("log"):
        if (workdir / log).is_file():
            seen.update(VISIBLE.findall((workdir / log).read_text()))
    return seen


def job_record(cluster: SlurmCluster, slurm_id: str) -> dict[str, str]:
    """`scontrol show job` fields of a (recently finished) job."""
    text = cluster.run("scontrol", "show", "job", "-o", slurm_id)
    return dict(item.split("=", 1) for item in text.split() if "=" in item)


def allocation_window(record: dict[str, str]) -> tuple[datetime, datetime]:
    """Start and end of a job's allocation, as SLURM recorded them (whole seconds)."""
    return datetime.fromisoformat(record["StartTime"]), datetime.fromisoformat(record["EndTime"])


@pytest.fixture(scope="module")
def runs(
    slurm_cluster: SlurmCluster, demo_run: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """The shared demo's config run through SLURM, next to the shared local run."""
    workdir = tmp_path_factory.mktemp("slurm-run")
    workdir.chmod(0o755)  # SLURM job steps run as root too, but keep the tree traversable
    write_shared_demo(workdir)
    # A second model: two embedding jobs, one per model, to run on the two GPUs at once.
    config = shared_demo()
    config["models"]["tiny2"] = tiny_model(seed=1)
    write_config(workdir, config)
    # --workflow-profile replaces profiles/default, whose `resources: gpu: 1` would let only one
    # GPU job run at a time on the cluster.
    on_slurm = snakemake(workdir, "--workflow-profile", str(PROFILE), env=slurm_cluster.env)
    finish(on_slurm, workdir, "SLURM run")
    return {"slurm": workdir, "local": demo_run}


def test_workflow_on_slurm_matches_a_local_run(
    runs: dict[str, Path], slurm_cluster: SlurmCluster
) -> None:
    workdir = runs["slurm"]
    log = (workdir / "snakemake.log").read_text()
    jobs = parse_jobs(log)
    submitted = {
        m.group(1): (m.group(2), m.group(3)) for m in map(SUBMITTED.search, log.splitlines()) if m
    }
    local_rules = declared_localrules()

    # Every job outside localrules went through sbatch; the declared light rules stayed local.
    remote = [job for job in jobs if not job.local]
    assert remote, log[-4000:]
    for job in jobs:
        if job.local:
            assert job.rule in local_rules, f"{job.rule} ran locally but is not in localrules"
            assert job.jobid not in submitted
        else:
            assert job.rule not in local_rules, f"{job.rule} is in localrules but was submitted"
            assert job.jobid in submitted, f"{job.rule} (job {job.jobid}) was not submitted"
    assert {"tables", "provenance"} <= {job.rule for job in jobs if job.local}
    assert len(submitted) == len(remote)

    # ... and SLURM ran each of them: COMPLETED, labelled with its rule, the rule run inside it,
    # GPU rules with one GPU and the profile's CPUs per GPU, the others without a GPU.
    slurm_ids = {job.jobid: submitted[job.jobid][0] for job in remote}
    records = {slurm_id: job_record(slurm_cluster, slurm_id) for slurm_id in slurm_ids.values()}
    states = slurm_cluster.job_states(sorted(slurm_ids.values()))
    assert states == dict.fromkeys(slurm_ids.values(), "COMPLETED"), states
    comments = dict(
        line.split(maxsplit=1)
        for line in slurm_cluster.run("squeue", "-h", "-t", "all", "-o", "%i %k").splitlines()
    )
    # The host printed the cluster's embedding cut, and every job planned the same one when
    # it read the Snakefile again inside its allocation.
    cut = "vlbench embedding jobs: per_benchmark (auto: jobs run on a cluster"
    assert cut in log
    for job in remote:
        slurm_id, slurm_log = submitted[job.jobid]
        assert comments[slurm_id].startswith(f"rule_{job.rule}"), (job, comments[slurm_id])
        text = Path(slurm_log).read_text()
        assert re.search(rf"^(rule|checkpoint) {job.rule}:$", text, re.MULTILINE), slurm_log
        assert "--executor slurm-jobstep" in text, slurm_log
        assert cut in text, slurm_log
        gres = records[slurm_id].get("TresPerJob", "")
        if job.uses_gpu:
            assert gres == "gres:gpu:1", (slurm_id, records[slurm_id])
            assert records[slurm_id].get("CpusPerTres") == "gres:gpu:2", records[slurm_id]
        else:
            assert "gpu" not in gres, (slurm_id, records[slurm_id])

    # GPU jobs with overlapping allocations saw different devices.
    gpu_jobs = [job for job in remote if job.uses_gpu]
    assert len(gpu_jobs) >= 2, [job.rule for job in remote]
    devices, windows = {}, {}
    for job in gpu_jobs:
        slurm_id = slurm_ids[job.jobid]
        seen = visible_devices_seen(workdir, job, slurm_id)
        assert len(seen) == 1, f"GPU job {slurm_id} ({job.rule}) recorded devices {seen}"
        devices[slurm_id] = seen.pop()
        assert devices[slurm_id] in {"0", "1"}, devices
        windows[slurm_id] = allocation_window(records[slurm_id])
    overlapping = [
        (a, b)
        for a, b in itertools.combinations(sorted(windows), 2)
        if windows[a][0] < windows[b][1] and windows[b][0] < windows[a][1]
    ]
    assert overlapping, f"no two GPU jobs ran at the same time: {windows}"
    for a, b in overlapping:
        assert devices[a] != devices[b], f"jobs {a} and {b} overlapped on GPU {devices[a]}"

    # The cluster's rows of the shared model equal the local run's.
    tables = {
        name: pl.read_csv(path / "results" / "tables" / "metrics.csv").filter(
            pl.col("model") == "tiny"
        )
        for name, path in runs.items()
    }
    assert tables["slurm"].height > 0
    assert tables["slurm"].equals(tables["local"]), (tables["slurm"], tables["local"])

    summary = ", ".join(
        f"{job.rule}({job.fields.get('wildcards', '')})={slurm_ids[job.jobid]}"
        + (f" on GPU {devices[slurm_ids[job.jobid]]}" if job.uses_gpu else "")
        for job in remote
    )
    print(f"SLURM job ids: {summary}")
    report_job_ids("test_workflow_on_slurm_matches_a_local_run", summary)
