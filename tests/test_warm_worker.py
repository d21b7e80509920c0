"""The warm embedding worker: jobs run in forked children with the client's whole context.

Clients are real processes (as Snakemake starts them) talking to a real worker over its Unix
socket; the jobs are small functions in a module the tests write.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vlbench.errors import VlbenchError
from vlbench.warm import client as warm_client

JOBS = """
import json, os, subprocess, sys, time
from vlbench.errors import VlbenchError
from vlbench.rule_log import rule_log

def report(payload):
    mask = os.umask(0); os.umask(mask)
    print("job stdout", flush=True)
    sys.stderr.write("job stderr\\n")
    facts = {"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(),
             "var": os.environ.get("WARM_TEST_VAR"), "umask": mask,
             "torch": "torch" in sys.modules}
    with open(payload["out"], "w") as handle:
        json.dump(facts, handle)

def bad_input(payload):
    with rule_log(payload["log"]):
        raise VlbenchError("rows.csv row 3: no caption")

def crash(payload):
    raise RuntimeError("boom")

def exit_code(payload):
    raise SystemExit(payload["code"])

def nap(payload):
    time.sleep(payload["seconds"])
    report(payload)

def hang(payload):
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with open(payload["out"], "w") as handle:
        json.dump({"pid": os.getpid(), "helper": helper.pid}, handle)
    time.sleep(60)
"""

CLIENT = """
import json, os, sys
from vlbench.warm.client import run_job
print("client", os.getpid(), flush=True)
run_job(sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3]))
"""


@pytest.fixture(scope="module")
def jobs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A module of small jobs, importable by clients and by the worker's children."""
    directory = tmp_path_factory.mktemp("jobs")
    (directory / "warm_test_jobs.py").write_text(JOBS)
    (directory / "client.py").write_text(CLIENT)
    # The key a client in this folder computes (its sys.path starts with the script's folder).
    (directory / "key.py").write_text(
        "from vlbench.warm.client import worker_key\nprint(worker_key())\n"
    )
    return directory


@pytest.fixture(scope="module")
def worker_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private worker folder for this module's workers; they are stopped at the end."""
    directory = tmp_path_factory.mktemp("workers")
    directory.chmod(0o700)
    yield directory
    warm_client.stop_workers(directory)


def client_env(jobs_dir: Path, folder: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    src = str(Path(warm_client.__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([str(jobs_dir), src])
    env[warm_client.WORKER_DIR_ENV] = str(folder)
    env["WARM_TEST_VAR"] = "from the client"
    return {**env, **extra}


def start_client(
    jobs_dir: Path,
    folder: Path,
    target: str,
    payload: dict,
    idle: float = 60,
    cwd: Path | None = None,
    **env: str,
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(jobs_dir / "client.py"), target, json.dumps(payload), str(idle)],
        env=client_env(jobs_dir, folder, **env),
        cwd=cwd or jobs_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_client(*args, **kwargs) -> subprocess.CompletedProcess[str]:
    process = start_client(*args, **kwargs)
    stdout, stderr = process.communicate(timeout=180)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def client_pid(result: subprocess.CompletedProcess[str]) -> int:
    return int(result.stdout.split("client ", 1)[1].split()[0])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"  # a zombie has finished
    except (FileNotFoundError, ProcessLookupError):  # gone between the two looks
        return False


def test_jobs_run_in_one_warm_worker_with_the_clients_context(
    jobs_dir: Path, worker_folder: Path, tmp_path: Path
) -> None:
    facts = []
    for run in range(2):
        out = tmp_path / f"facts-{run}.json"
        workdir = tmp_path / f"cwd-{run}"
        workdir.mkdir()
        result = run_client(
            jobs_dir, worker_folder, "warm_test_jobs:report", {"out": str(out)}, cwd=workdir
        )
        assert result.returncode == 0, result.stderr
        # The job's output streams are the client's, as if it had run in the client.
        assert "job stdout" in result.stdout and "job stderr" in result.stderr
        fact = json.loads(out.read_text())
        assert fact["pid"] != client_pid(result)
        assert fact["cwd"] == str(workdir)
        assert fact["var"] == "from the client"
        assert fact["torch"]  # imported by the worker, not by the job
        facts.append(fact)
    # Both jobs were forked from the same worker process, which outlives them.
    assert facts[0]["ppid"] == facts[1]["ppid"]
    assert alive(facts[0]["ppid"])
    assert facts[0]["pid"] != facts[1]["pid"]


def test_a_jobs_failure_is_the_clients_failure(
    jobs_dir: Path, worker_folder: Path, tmp_path: Path
) -> None:
    log = tmp_path / "rule.log"
    result = run_client(jobs_dir, worker_folder, "warm_test_jobs:bad_input", {"log": str(log)})
    assert result.returncode == 1
    assert result.stderr.strip() == "vlbench error: rows.csv row 3: no caption"
    assert "ERROR: rows.csv row 3: no caption" in log.read_text()

    crashed = run_client(jobs_dir, worker_folder, "warm_test_jobs:crash", {})
    assert crashed.returncode == 1
    assert "RuntimeError: boom" in crashed.stderr

    code = run_client(jobs_dir, worker_folder, "warm_test_jobs:exit_code", {"code": 3})
    assert code.returncode == 3


def wait_for(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not (path.is_file() and path.stat().st_size):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_killing_the_client_kills_the_job_and_its_processes(
    jobs_dir: Path, worker_folder: Path, tmp_path: Path
) -> None:
    out = tmp_path / "hang.json"
    process = start_client(jobs_dir, worker_folder, "warm_test_jobs:hang", {"out": str(out)})
    wait_for(out)
    job = json.loads(out.read_text())
    assert alive(job["pid"]) and alive(job["helper"])
    process.send_signal(signal.SIGKILL)
    process.communicate()
    deadline = time.monotonic() + 10
    while alive(job["pid"]) or alive(job["helper"]):
        assert time.monotonic() < deadline, "the job outlived its client"
        time.sleep(0.05)


def test_idle_worker_exits_and_a_stale_socket_is_replaced(jobs_dir: Path, tmp_path: Path) -> None:
    # A folder deeper than a Unix socket address can name: reached through its descriptor.
    folder = tmp_path / ("deep-" * 20) / "workers"
    folder.mkdir(mode=0o700, parents=True)
    out = tmp_path / "facts.json"
    first = run_client(jobs_dir, folder, "warm_test_jobs:report", {"out": str(out)}, idle=1)
    assert first.returncode == 0, first.stderr
    worker = json.loads(out.read_text())["ppid"]
    assert worker != client_pid(first)
    assert "running the job in this process" not in first.stderr
    deadline = time.monotonic() + 30
    while alive(worker):
        logs = [path.read_text() for path in folder.glob("*.log")]
        assert time.monotonic() < deadline, f"the idle worker {worker} did not exit: {logs}"
        time.sleep(0.1)
    assert not list(folder.glob("*.sock")) and not list(folder.glob("*.pid"))

    # A worker killed outright leaves its socket behind: the next client starts a new one.
    key = worker_key_in(jobs_dir, folder)
    stale = socket.socket(socket.AF_UNIX)
    with warm_client.socket_address(folder / f"{key}.sock") as address:
        stale.bind(address)
    stale.close()
    assert (folder / f"{key}.lock").is_file()  # the key the client used
    second = run_client(jobs_dir, folder, "warm_test_jobs:report", {"out": str(out)}, idle=1)
    assert second.returncode == 0, second.stderr
    assert "running the job in this process" not in second.stderr
    assert json.loads(out.read_text())["ppid"] not in (worker, client_pid(second))


def worker_key_in(jobs_dir: Path, folder: Path) -> str:
    """The key a client started by these tests computes."""
    return subprocess.run(
        [sys.executable, str(jobs_dir / "key.py")],
        env=client_env(jobs_dir, folder),
        cwd=jobs_dir,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_a_job_longer_than_the_idle_time_keeps_its_worker_for_the_next(
    jobs_dir: Path, tmp_path: Path
) -> None:
    """Idle time counts from the end of the last job, not from its start."""
    folder = tmp_path / "workers"
    folder.mkdir(mode=0o700)
    try:
        facts = []
        for run, seconds in enumerate((6, 0)):
            out = tmp_path / f"facts-{run}.json"
            payload = {"out": str(out), "seconds": seconds}
            result = run_client(jobs_dir, folder, "warm_test_jobs:nap", payload, idle=4)
            assert result.returncode == 0, result.stderr
            assert "running the job in this process" not in result.stderr
            facts.append(json.loads(out.read_text()))
        assert facts[0]["ppid"] == facts[1]["ppid"]
    finally:
        warm_client.stop_workers(folder)


def test_a_client_that_meets_a_worker_on_its_way_out_starts_a_new_one(
    jobs_dir: Path, tmp_path: Path
) -> None:
    """The lock is still held (a worker that unpublished its socket and is exiting) when the
    client comes; once it is released, the client starts a worker instead of waiting it out."""
    folder = tmp_path / "workers"
    folder.mkdir(mode=0o700)
    lock = folder / f"{worker_key_in(jobs_dir, folder)}.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "time.sleep(1.5)\n",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        out = tmp_path / "facts.json"
        result = run_client(jobs_dir, folder, "warm_test_jobs:report", {"out": str(out)})
        assert result.returncode == 0, result.stderr
        assert "running the job in this process" not in result.stderr
        fact = json.loads(out.read_text())
        assert fact["ppid"] not in (client_pid(result), holder.pid)
    finally:
        holder.wait()
        warm_client.stop_workers(folder)


@pytest.mark.parametrize("how", ["idle_seconds 0", "inside SLURM"])
def test_jobs_run_in_their_own_process_when_no_worker_should(
    jobs_dir: Path, worker_folder: Path, tmp_path: Path, how: str
) -> None:
    out = tmp_path / "facts.json"
    idle, env = (0.0, {}) if how == "idle_seconds 0" else (60.0, {"SLURM_JOB_ID": "7"})
    result = run_client(
        jobs_dir, worker_folder, "warm_test_jobs:report", {"out": str(out)}, idle=idle, **env
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text())["pid"] == client_pid(result)


def test_a_worker_that_closes_before_taking_the_job_is_asked_again(
    jobs_dir: Path, tmp_path: Path
) -> None:
    """A worker leaving at its idle time may accept a connection and close it unread: the job
    has not started, so the client hands it to the next worker instead of running it itself."""
    folder = tmp_path / "workers"
    folder.mkdir(mode=0o700)
    socket_path = folder / f"{worker_key_in(jobs_dir, folder)}.sock"
    leaving = socket.socket(socket.AF_UNIX)
    with warm_client.socket_address(socket_path) as address:
        leaving.bind(address)
    leaving.listen(1)
    out = tmp_path / "facts.json"
    client = start_client(jobs_dir, folder, "warm_test_jobs:report", {"out": str(out)})
    try:
        conn, _ = leaving.accept()  # the client's first try
        conn.close()
        leaving.close()
        socket_path.unlink()
        stdout, stderr = client.communicate(timeout=180)
        assert client.returncode == 0, stderr
        assert "running the job in this process" not in stderr
        pid = int(stdout.split("client ", 1)[1].split()[0])
        assert json.loads(out.read_text())["ppid"] != pid
    finally:
        client.kill()
        warm_client.stop_workers(folder)


def test_a_worker_that_cannot_start_leaves_the_job_to_the_client(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, jobs_dir: Path, capsys
) -> None:
    folder = tmp_path / "workers"
    monkeypatch.setenv(warm_client.WORKER_DIR_ENV, str(folder))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.syspath_prepend(str(jobs_dir))

    def broken_worker(paths, idle_seconds, profile):
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(2)"])

    monkeypatch.setattr(warm_client, "start_server", broken_worker)
    out = tmp_path / "facts.json"
    warm_client.run_job("warm_test_jobs:report", {"out": str(out)}, 60)
    assert json.loads(out.read_text())["pid"] == os.getpid()
    assert "exited with status 2 before serving" in capsys.readouterr().err


def test_the_worker_key_follows_code_environment_and_installs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    package = tmp_path / "vlbench"
    package.mkdir()
    (package / "module.py").write_text("A = 1\n")
    monkeypatch.setattr(warm_client, "package_dir", lambda: package)
    site = tmp_path / "site"
    (site / "fake_library").mkdir(parents=True)
    (site / "fake_library" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(warm_client, "LIBRARIES", ("fake_library",))
    env = {"HOME": "/home/a"}
    base = warm_client.worker_key(env)
    # What Snakemake sets per job, and compiled files, do not change it.
    per_job = {"_": "/usr/bin/env", "OMP_NUM_THREADS": "4", "TMPDIR": "/scratch"}
    assert warm_client.worker_key({**env, **per_job}) == base
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "module.cpython-311.pyc").write_bytes(b"x")
    assert warm_client.worker_key(env) == base
    assert warm_client.worker_key(env, profile="light") != base
    changed = [warm_client.worker_key({**env, "HF_HOME": "/elsewhere"})]
    (site / "fake_library-9.9.dist-info").mkdir()  # an upgrade beside the library
    changed.append(warm_client.worker_key(env))
    (package / "module.py").write_text("A = 2\n")
    changed.append(warm_client.worker_key(env))
    assert len({base, *changed}) == 4


def test_a_local_run_starts_its_workers_while_its_first_jobs_run(
    jobs_dir: Path, tmp_path: Path
) -> None:
    """`prewarm` starts a worker in the background and returns; the next job finds it."""
    folder = tmp_path / "workers"
    folder.mkdir(mode=0o700)
    env = client_env(jobs_dir, folder)
    code = "from vlbench.warm.client import prewarm; print(prewarm('light', 60))"
    started = [
        subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(2)
    ]
    assert started == ["True", "False"]  # the second sees the first starting (or serving)
    out = tmp_path / "facts.json"
    result = run_client(jobs_dir, folder, "warm_test_jobs:report", {"out": str(out)})
    assert result.returncode == 0, result.stderr
    assert len(list(folder.glob("*.log"))) == 2  # the light worker and the job's embedding one
    warm_client.stop_workers(folder)


def test_a_worker_folder_others_can_enter_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    monkeypatch.setenv(warm_client.WORKER_DIR_ENV, str(folder))
    with pytest.raises(VlbenchError, match="must be a 0700 folder"):
        warm_client.worker_dir()


def test_a_worker_whose_imports_touch_cuda_refuses_to_fork(tmp_path: Path) -> None:
    """A forked child cannot use a CUDA driver its parent initialised: such a worker does not
    serve (its clients then run their jobs themselves)."""
    # What torch.cuda.is_available() does without the NVML check: cudaGetDeviceCount (cuInit).
    (tmp_path / "touches_cuda.py").write_text("import torch\ntorch._C._cuda_getDeviceCount()\n")
    (tmp_path / "quiet.py").write_text("import torch\n")
    code = (
        "import sys; from vlbench.warm import server as w; "
        "print(repr(w.preload(('torch', sys.argv[1]))))"
    )
    src = str(Path(warm_client.__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), src])}
    env.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
    outputs = {
        module: subprocess.run(
            [sys.executable, "-c", code, module], env=env, capture_output=True, text=True
        ).stdout.strip()
        for module in ("touches_cuda", "quiet")
    }
    assert outputs == {
        "touches_cuda": repr("importing the worker's modules initialised the CUDA driver"),
        "quiet": "''",
    }
