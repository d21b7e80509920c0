"""Run a rule's job in a warm worker: its heavy imports done once per machine.

On a GPU the forward pass is cheap and a job's own start-up dominates: importing torch,
torchvision, open_clip and transformers takes about 5 s per embedding job, and numpy, pyarrow,
polars and Snakemake's script support most of a light job's second. So a rule's process stays
light: it sends its job (a target function and a plain-data payload, plus its stdin/stdout/
stderr, working directory, environment, umask and process group) over a Unix socket to a warm
worker (`vlbench.warm.server`) of the job's profile (`PROFILES`: "embedding", "light"), which
forks a child with everything imported; the child runs the job exactly as the rule's process
would, and its exit status becomes the rule's. A light rule script hands itself over whole
(`hand_over_script`).

* The first job on a machine starts the worker (a detached process) and waits for it; later jobs
  connect to it. It exits after `idle_seconds` without a job (config `warm_workers`).
* A worker serves only jobs that would have imported the very same code: its socket's name is a
  hash of the profile, the Python executable, `sys.path`, the vlbench package's files, the
  distributions installed on `sys.path` (names and versions) and the environment. Edit the
  code, upgrade a package or change an environment variable, and the next job starts a new
  worker (the old one idles out).
* A job killed by Snakemake closes its socket and the worker kills the job's child (with its
  decode workers); outputs are written atomically, so nothing finished-looking is left.
* `idle_seconds: 0`, a job inside a SLURM allocation (a worker started there would die with the
  allocation) or a worker that cannot start: the job runs in the rule's own process.

This module imports nothing heavy: it is what a rule script imports.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import importlib.util
import json
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from vlbench.atomic import current_umask
from vlbench.errors import VlbenchError

# Where sockets, locks and logs live: VLBENCH_WORKER_DIR, else the user's runtime folder.
WORKER_DIR_ENV = "VLBENCH_WORKER_DIR"
# Set in a job's environment when it runs in a worker's child: the worker's pid.
WARM_WORKER_ENV = "VLBENCH_WARM_WORKER"
# Set in a light rule script's child: the script file it runs (`hand_over_script`).
WARM_SCRIPT_ENV = "VLBENCH_WARM_SCRIPT"
# What each profile's worker imports (`vlbench.warm.server.PRELOADS`) and which jobs it serves.
PROFILES = ("embedding", "light")
STARTUP_SECONDS = 120.0
HANDOVER_ATTEMPTS = 3
HEADER = struct.Struct("!Q")
SHORT_ADDRESS = 100  # bytes; a Unix socket address holds at most 107
CODE_SUFFIXES = (".py", ".json", ".yaml")
# The libraries the workers import (their origins are part of the key).
LIBRARIES = (
    "torch",
    "torchvision",
    "open_clip",
    "transformers",
    "huggingface_hub",
    "numpy",
    "pyarrow",
    "polars",
    "snakemake",
)
# Set per job by Snakemake (threads, temporary folder) or by the shell; a worker's child takes
# the job's own values (and torch's threads are set from the job's), so they are not keyed.
PER_JOB_VARIABLES = (
    "_",
    "OMP_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "TMPDIR",
    "TMP",
    "TEMP",
    "TEMPDIR",
    "_RJEM_MALLOC_CONF",
)
INSTALL_SUFFIXES = (".dist-info", ".egg-info", ".egg-link", ".pth")


def worker_dir() -> Path:
    """This user's private folder for worker sockets (created 0700; refused if not ours)."""
    configured = os.environ.get(WORKER_DIR_ENV)
    if configured:
        directory = Path(configured)
    elif os.environ.get("XDG_RUNTIME_DIR"):
        directory = Path(os.environ["XDG_RUNTIME_DIR"]) / "vlbench-workers"
    else:
        directory = Path("/tmp") / f"vlbench-workers-{os.getuid()}"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = directory.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise VlbenchError(f"warm worker folder {directory} must be a 0700 folder of this user")
    return directory


def package_dir() -> Path:
    """The folder of the vlbench package this process imports."""
    return Path(__file__).resolve().parent.parent


def _package_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*")):
        if path.suffix in CODE_SUFFIXES and "__pycache__" not in path.parts:
            yield path


def installed_distributions(folder: str) -> list[str]:
    """Names of the installed distributions (with versions) and .pth files in a folder."""
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return []
    return sorted(name for name in names if name.endswith(INSTALL_SUFFIXES))


def library_origins() -> dict[str, Any]:
    """Where each library a worker imports would come from, and what is installed beside it
    (found without importing anything)."""
    origins: dict[str, Any] = {}
    for name in LIBRARIES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        origin = spec.origin if spec and spec.origin else None
        folder = str(Path(origin).parent.parent) if origin else ""
        origins[name] = [origin, installed_distributions(folder) if folder else []]
    return origins


def worker_key(environ: dict[str, str] | None = None, profile: str = "embedding") -> str:
    """The profile and a hash of everything its worker's imports depend on (module docstring).

    Variables Snakemake sets per job (`PER_JOB_VARIABLES`) are left out: the child takes the
    job's own values, so the main Snakemake process computes the same key as its jobs.
    """
    environ = dict(os.environ if environ is None else environ)
    for name in PER_JOB_VARIABLES:
        environ.pop(name, None)
    digest = hashlib.sha256()
    root = package_dir()
    for path in _package_files(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    context = {
        "profile": profile,
        "python": sys.executable,
        "version": sys.version,
        "package": str(root),
        "libraries": library_origins(),
        "env": environ,
    }
    digest.update(json.dumps(context, sort_keys=True).encode())
    return f"{profile}-{digest.hexdigest()[:20]}"


def worker_paths(key: str) -> dict[str, Path]:
    """Socket, lock, pid and log file of the worker with this key."""
    base = worker_dir() / key
    return {kind: base.with_suffix(f".{kind}") for kind in ("sock", "lock", "pid", "log")}


def run_in_process(target: str, payload: dict[str, Any]) -> None:
    """Run `module:function` on the payload in this process."""
    module, _, function = target.partition(":")
    job: Callable[[dict[str, Any]], None] = getattr(importlib.import_module(module), function)
    job(payload)


def send_message(conn: socket.socket, message: dict[str, Any], fds: list[int] = ()) -> None:
    """One length-prefixed JSON message, with file descriptors attached to its first byte."""
    body = json.dumps(message).encode()
    data = HEADER.pack(len(body)) + body
    if fds:
        sent = socket.send_fds(conn, [data], list(fds))
        conn.sendall(data[sent:])
    else:
        conn.sendall(data)


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    chunks = b""
    while len(chunks) < size:
        chunk = conn.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed mid-message")
        chunks += chunk
    return chunks


def receive_message(conn: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any], list[int]]:
    """The next message of `send_message` and the descriptors that came with it."""
    fds: list[int] = []
    if max_fds:
        head, fds, _, _ = socket.recv_fds(conn, HEADER.size, max_fds)
        if not head:
            raise ConnectionError("connection closed")
        head += _recv_exactly(conn, HEADER.size - len(head))
    else:
        head = _recv_exactly(conn, HEADER.size)
    (size,) = HEADER.unpack(head)
    return json.loads(_recv_exactly(conn, size)), fds


@contextlib.contextmanager
def socket_address(path: Path) -> Iterator[str]:
    """An address for `path` that fits a Unix socket's 108 bytes, however deep its folder is
    (through this process's descriptor of the folder, on Linux)."""
    if len(os.fsencode(path)) < SHORT_ADDRESS or not Path("/proc/self/fd").is_dir():
        yield str(path)
        return
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{folder}/{path.name}"
    finally:
        os.close(folder)


def _connect(path: Path) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with socket_address(path) as address:
            conn.connect(address)
    except OSError:
        conn.close()
        return None
    return conn


def _server_starting(lock_path: Path) -> bool:
    """Whether a worker holds the lock (it is importing, or serving)."""
    with open(lock_path, "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def start_server(
    paths: dict[str, Path], idle_seconds: float, profile: str
) -> subprocess.Popen[bytes] | None:
    """Start a detached warm worker that imports the same vlbench package as this process;
    None when another worker holds the lock (it is starting or serving).

    The lock is taken here and handed to the worker, so two jobs that find no worker at the
    same moment start one between them.
    """
    lock = os.open(paths["lock"], os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(package_dir().parent), *filter(None, [env.get("PYTHONPATH")])]
        )
        command = [sys.executable, "-m", "vlbench.warm.server", str(paths["sock"])]
        command += ["--idle-seconds", str(idle_seconds), "--profile", profile]
        command += ["--lock-fd", str(lock)]
        log: BinaryIO
        with open(paths["log"], "ab") as log:
            return subprocess.Popen(
                command,
                env=env,
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                pass_fds=(lock,),
            )
    finally:
        os.close(lock)  # the worker's copy keeps the lock


def prewarm(profile: str, idle_seconds: float) -> bool:
    """Start a worker of `profile` in the background unless one is serving or starting; whether
    one was started. The Snakefile calls it when a local run begins, so that the imports happen
    while the first jobs (preparing the data) run."""
    if no_worker_here(idle_seconds):
        return False
    paths = worker_paths(worker_key(profile=profile))
    conn = _connect(paths["sock"])
    if conn is not None:
        conn.close()
        return False
    return start_server(paths, idle_seconds, profile) is not None


def connect_to_worker(key: str, idle_seconds: float, profile: str) -> socket.socket:
    """A connection to the worker with this key, starting one if none is running."""
    paths = worker_paths(key)
    conn = _connect(paths["sock"])
    if conn is not None:
        return conn
    started = start_server(paths, idle_seconds, profile)
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        conn = _connect(paths["sock"])
        if conn is not None:
            return conn
        if not _server_starting(paths["lock"]):
            if started is not None and started.poll() is not None:
                raise VlbenchError(
                    f"the warm embedding worker exited with status {started.returncode} before "
                    f"serving (its log: {paths['log']})"
                )
            # The lock's holder left without serving us (a worker that was going idle as we
            # came, or another client's worker that failed): start one now.
            started = start_server(paths, idle_seconds, profile) or started
        time.sleep(0.05)
    raise VlbenchError(f"the warm embedding worker did not start in time (its log: {paths['log']})")


def _wait_for_exit(conn: socket.socket, log_path: Path) -> int:
    """The job's exit status as the worker reports it (128 + N for a signal N)."""
    while True:
        try:
            message, _ = receive_message(conn)
        except ConnectionError:
            raise VlbenchError(
                f"the warm embedding worker went away during the job (its log: {log_path})"
            ) from None
        if "exit" in message:
            return int(message["exit"])
        if "signal" in message:
            sys.stderr.write(f"the job's process was killed by signal {message['signal']}\n")
            return 128 + int(message["signal"])


def run_in_worker(
    target: str, payload: dict[str, Any], idle_seconds: float, profile: str = "embedding"
) -> int:
    """Run `module:function` on the payload in a forked child of the warm worker; its status."""
    key = worker_key(profile=profile)
    request = {
        "target": target,
        "payload": payload,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "umask": current_umask(),
        "process_group": os.getpgrp(),
    }
    sys.stdout.flush()
    sys.stderr.flush()
    for _ in range(HANDOVER_ATTEMPTS):
        with connect_to_worker(key, idle_seconds, profile) as conn:
            try:
                send_message(conn, request, [0, 1, 2])
                started, _ = receive_message(conn)
            except (OSError, ValueError):
                # Closed before it took the job (a worker leaving at its idle time as the
                # request came): nothing ran, so ask again; a new worker starts if needed.
                continue
            if "started" not in started:
                raise VlbenchError(f"the warm worker answered {started!r} instead of starting")
            return _wait_for_exit(conn, worker_paths(key)["log"])
    raise VlbenchError(
        f"the warm worker closed the connection {HANDOVER_ATTEMPTS} times before taking the job"
    )


def stop_workers(directory: Path | None = None) -> list[int]:
    """Stop every warm worker with a pid file in `directory` (default: `worker_dir()`)."""
    stopped = []
    for pid_file in sorted((directory or worker_dir()).glob("*.pid")):
        try:
            pid = int(pid_file.read_text())
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError):
            continue
        stopped.append(pid)
    return stopped


def no_worker_here(idle_seconds: float) -> bool:
    """Whether jobs run in their own process: workers off, or inside a SLURM allocation."""
    return idle_seconds <= 0 or bool(os.environ.get("SLURM_JOB_ID"))


def run_job(
    target: str, payload: dict[str, Any], idle_seconds: float, profile: str = "embedding"
) -> None:
    """Run a job in a warm worker of `profile` when one can serve it, else in this process.

    Exits with the job's status when the job fails in the worker (its error is already on this
    process's stderr and in the rule's log).
    """
    if no_worker_here(idle_seconds):
        run_in_process(target, payload)
        return
    try:
        status = run_in_worker(target, payload, idle_seconds, profile)
    except VlbenchError as error:
        sys.stderr.write(f"vlbench: {error}; running the job in this process instead\n")
        run_in_process(target, payload)
        return
    if status:
        raise SystemExit(status)


def hand_over_script(snakemake: Any, script_globals: dict[str, Any]) -> None:
    """First call of a light rule script: run the whole script in a warm worker's child.

    Snakemake runs a rule script as a temporary file (its `__real_file__`) that starts by
    unpickling the job; the child runs that same file, so it rebuilds the same `snakemake`
    object, calls this again (which then returns) and does the job. In the rule's own process
    this exits with the child's status; it returns when the script should run here instead.
    """
    script = script_globals.get("__real_file__") or script_globals["__file__"]
    if os.environ.get(WARM_SCRIPT_ENV) == script:
        return  # this is the child
    idle_seconds = float(snakemake.config.get("warm_workers", {}).get("idle_seconds", 0))
    if no_worker_here(idle_seconds):
        return
    try:
        status = run_in_worker(
            "vlbench.warm.scripts:run_script", {"script": script}, idle_seconds, "light"
        )
    except VlbenchError as error:
        sys.stderr.write(f"vlbench: {error}; running the job in this process instead\n")
        return
    raise SystemExit(status)
