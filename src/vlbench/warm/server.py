"""The warm embedding worker: import torch and the model libraries once, fork a child per job.

Started by `vlbench.warm.client` as `python -m vlbench.warm.server SOCKET`.
It imports the embedding job's modules (never touching CUDA or running a torch op, so a forked
child starts as clean as a fresh process), takes the lock beside its socket (one worker per
socket), publishes the socket, and serves until it has been idle for `--idle-seconds`:

* a request carries the job's target, payload, working directory, environment, umask and its
  stdin/stdout/stderr; the worker forks a child that takes all of them, becomes its own process
  group, runs the job and exits with its status;
* the worker reports the child's exit status (or signal) back; if the client goes away first,
  it kills the child's process group (the job and its decode workers);
* it is single-threaded (a selector over the socket, the clients and the children's pidfds), so
  forking is safe.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import importlib
import os
import selectors
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlbench.atomic import JOB_GROUP_ENV
from vlbench.warm.client import (
    WARM_WORKER_ENV,
    receive_message,
    send_message,
    socket_address,
)

# What each profile's jobs import: importing it here, once, is the whole point of the worker.
LIGHT = (
    "numpy",
    "pyarrow.parquet",
    "polars",
    "snakemake.iocontainers",
    "snakemake.logging",
    "vlbench.warm.scripts",
    "vlbench.embedding.shard_files",
    "vlbench.rank.job",
    "vlbench.rank.index",
    "vlbench.metrics.job",
)
PRELOADS = {
    "embedding": ("torch", "torchvision", "open_clip", "vlbench.embedding.shard_job"),
    "light": LIGHT,
}
PR_SET_PDEATHSIG = 1


@dataclass
class Job:
    """A running child and the client connection waiting for its status."""

    pid: int
    conn: socket.socket | None
    pidfd: int


def _die_with_parent() -> None:
    """Have the kernel kill this child if the worker dies (Linux; best effort elsewhere)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def run_child(request: dict[str, Any], fds: list[int]) -> int:
    """In the forked child: take the client's process context, run the job, return its status."""
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as in a fresh process (see main)
    _die_with_parent()
    for target_fd, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target_fd)
        os.close(fd)
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ[WARM_WORKER_ENV] = str(os.getppid())
    os.environ[JOB_GROUP_ENV] = str(request["process_group"])
    module, _, function = request["target"].partition(":")
    try:
        getattr(importlib.import_module(module), function)(request["payload"])
    except SystemExit as done:
        code = done.code
        if code is None or isinstance(code, int):
            return code or 0
        sys.stderr.write(f"{code}\n")
        return 1
    except BaseException:  # the job's own traceback, as a fresh process would print it
        traceback.print_exc()
        return 1
    return 0


class WarmServer:
    """Accept jobs on a Unix socket and run each in a forked child."""

    def __init__(self, listener: socket.socket, idle_seconds: float, lock_fd: int) -> None:
        self.listener = listener
        self.lock_fd = lock_fd  # held for the worker's life; never by its children
        self.idle_seconds = idle_seconds
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, "accept")
        self.jobs: dict[int, Job] = {}
        self.last_active = time.monotonic()

    def _start(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        try:
            request, fds = receive_message(conn, max_fds=3)
        except (OSError, ValueError):
            conn.close()
            return
        conn.settimeout(None)
        pid = os.fork()
        if pid == 0:  # the child: never returns into the server's loop
            status = 1
            try:
                self.selector.close()
                self.listener.close()
                conn.close()
                os.close(self.lock_fd)
                status = run_child(request, fds)
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(status)
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(OSError):  # a vanished client is noticed by the selector
            send_message(conn, {"started": pid})
        job = Job(pid, conn, os.pidfd_open(pid))
        self.jobs[pid] = job
        self.selector.register(conn, selectors.EVENT_READ, ("client", pid))
        self.selector.register(job.pidfd, selectors.EVENT_READ, ("child", pid))

    def _finish(self, pid: int) -> None:
        """The child exited: report its status to the client, if it is still there."""
        self.last_active = time.monotonic()
        job = self.jobs.pop(pid)
        _, status = os.waitpid(pid, 0)
        self.selector.unregister(job.pidfd)
        os.close(job.pidfd)
        if job.conn is None:
            return
        self.selector.unregister(job.conn)
        message = (
            {"signal": os.WTERMSIG(status)}
            if os.WIFSIGNALED(status)
            else {"exit": os.waitstatus_to_exitcode(status)}
        )
        with contextlib.suppress(OSError):
            send_message(job.conn, message)
        job.conn.close()

    def _client_gone(self, pid: int) -> None:
        """The client closed its end (killed, or interrupted): kill the job's process group."""
        job = self.jobs[pid]
        if job.conn is None:
            return
        with contextlib.suppress(OSError):
            if job.conn.recv(1):
                return  # clients send nothing after their request; ignore it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        self.selector.unregister(job.conn)
        job.conn.close()
        job.conn = None

    def _accept_pending(self) -> None:
        """Start every job already queued on the listener (non-blocking)."""
        self.listener.setblocking(False)
        while True:
            try:
                conn, _ = self.listener.accept()
            except BlockingIOError:
                return
            conn.setblocking(True)
            self._start(conn)

    def serve(self, socket_path: Path) -> None:
        """Serve until idle for `idle_seconds` (counted from the end of the last job); then
        unpublish, run what queued, and return."""
        while True:
            idle = time.monotonic() - self.last_active
            if not self.jobs and idle >= self.idle_seconds:
                break
            timeout = None if self.jobs else self.idle_seconds - idle
            for key, _ in self.selector.select(timeout):
                if key.data == "accept":
                    self._accept_pending()
                elif key.data[0] == "child":
                    self._finish(key.data[1])
                elif key.data[1] in self.jobs:
                    self._client_gone(key.data[1])
            if self.jobs:  # busy: a job that ends now starts the idle time afresh
                self.last_active = time.monotonic()
        # No new client can connect once the socket's name is gone; serve those that did.
        socket_path.unlink(missing_ok=True)
        self._accept_pending()
        self.selector.unregister(self.listener)
        self.listener.close()
        while self.jobs:
            for key, _ in self.selector.select():
                if key.data[0] == "child":
                    self._finish(key.data[1])
                elif key.data[1] in self.jobs:
                    self._client_gone(key.data[1])


def preload(modules: tuple[str, ...]) -> str:
    """Import `modules` without initialising CUDA; why the worker must not fork, if it must not.

    A process that has initialised the CUDA driver cannot hand it to forked children, so torch
    is imported with its NVML-based availability check, and any call that would initialise the
    driver (`cudaGetDeviceCount`) or CUDA itself is detected. Profiles without torch import it
    not at all.
    """
    if "torch" not in modules:
        for module in modules:
            importlib.import_module(module)
        return ""
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # children get the client's environment
    import torch

    driver_calls = []
    device_count = torch._C._cuda_getDeviceCount

    def counted() -> int:
        driver_calls.append(1)
        return device_count()

    torch._C._cuda_getDeviceCount = counted
    try:
        for module in modules:
            importlib.import_module(module)
    finally:
        torch._C._cuda_getDeviceCount = device_count
    if driver_calls or torch.cuda.is_initialized():
        return "importing the worker's modules initialised the CUDA driver"
    return ""


def publish(socket_path: Path) -> socket.socket:
    """Bind a listening socket under a temporary name, then move it to `socket_path`."""
    temporary = socket_path.with_name(f"{socket_path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with socket_address(temporary) as address:
        listener.bind(address)
    listener.listen(64)
    os.replace(temporary, socket_path)
    return listener


def main(argv: list[str] | None = None) -> int:
    """Preload, lock, publish, serve; remove the socket on the way out."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("socket", type=Path)
    parser.add_argument("--idle-seconds", type=float, required=True)
    parser.add_argument("--profile", choices=sorted(PRELOADS), default="embedding")
    parser.add_argument("--lock-fd", type=int, help="the lock, already taken by the client")
    args = parser.parse_args(argv)
    lock = args.lock_fd
    if lock is None:  # started by hand: take the lock (the client hands it over)
        lock = os.open(args.socket.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # another worker with this key is starting or serving
    # SIGTERM (`warm_client.stop_workers`): leave through `finally`; children die with us.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    started = time.monotonic()
    reason = preload(PRELOADS[args.profile])
    if reason:
        print(f"warm worker {os.getpid()}: not serving: {reason}", flush=True)
        return 3  # the waiting client runs its job in its own process
    listener = publish(args.socket)
    args.socket.with_suffix(".pid").write_text(f"{os.getpid()}\n")
    print(f"warm worker {os.getpid()}: imports took {time.monotonic() - started:.1f} s", flush=True)
    try:
        WarmServer(listener, args.idle_seconds, lock).serve(args.socket)
    finally:
        args.socket.unlink(missing_ok=True)
        args.socket.with_suffix(".pid").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
