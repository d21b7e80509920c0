"""Start and stop a throw-away single-node SLURM cluster (no systemd needed).

Used by the ``slurm``-marked tests in this folder.  Must run as root on a
Debian-like machine with ``slurmctld slurmd munge slurm-client`` installed
(see ``.ci/slurm-setup.sh``).

What :class:`SlurmCluster` does on :meth:`SlurmCluster.start`:

* writes ``/etc/slurm/slurm.conf``, ``gres.conf`` and ``cgroup.conf`` (any
  existing files are backed up and restored by :meth:`SlurmCluster.stop`, except
  leftovers of a killed test run, which are removed);
* state, spool, pid and log files live under a fresh temporary directory;
* starts ``munged`` (unless one already answers) with a key created on demand,
  then ``slurmctld -D`` and ``slurmd -D`` as child processes;
* waits until ``sinfo`` reports the node ``idle``.

The node advertises ``Gres=gpu:2`` backed by fake character devices, so jobs
requesting ``--gres=gpu:1``/``--gpus=1`` get distinct ``CUDA_VISIBLE_DEVICES``.
Accounting is off (no slurmdbd), so ``sacct`` is useless: poll with ``squeue``
(finished jobs stay visible there for ``MinJobAge`` seconds).

Usage::

    with SlurmCluster() as cluster:
        subprocess.run(["sbatch", "-p", cluster.partition, "--wrap", "hostname"])
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

SLURM_ETC = Path("/etc/slurm")
WRITTEN_BY = "# Written by tests/cluster/slurm_cluster.py"


def _left_by_a_killed_run(path: Path) -> bool:
    """Whether a config file is one this module wrote and a killed test run never restored.

    Such a file is removed at stop instead of being restored: left in place, it points every
    later `scontrol` (which snakemake-executor-plugin-slurm runs whenever Snakemake starts) at a
    controller that is gone, and each call then waits about ten seconds for it.
    """
    try:
        return path.read_text(errors="replace").startswith(WRITTEN_BY)
    except OSError:
        return False


MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_SOCKET_DIR = Path("/run/munge")
SBIN_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin")
REPO_ROOT = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = REPO_ROOT / ".ci" / "slurm-setup.sh"
REQUIRED_BINARIES = ("slurmctld", "slurmd", "munged", "sinfo", "sbatch", "squeue", "scancel")
CONF_FILES = ("slurm.conf", "gres.conf", "cgroup.conf")


# (test id, "name=job id, ...") of every test that ran SLURM jobs; printed in the terminal summary.
JOB_ID_REPORT: list[tuple[str, str]] = []


def report_job_ids(test_id: str, summary: str) -> None:
    """Remember the SLURM job ids a test used, so the CI log shows them even when it passes."""
    JOB_ID_REPORT.append((test_id, summary))


class SlurmClusterError(RuntimeError):
    """The cluster could not be started (details include daemon log tails)."""


def _path_with_sbin() -> str:
    parts = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(parts + [d for d in SBIN_DIRS if d not in parts])


def which(name: str) -> str | None:
    """Locate ``name`` on PATH, also searching the sbin directories."""
    return shutil.which(name, path=_path_with_sbin())


def missing_binaries() -> list[str]:
    """Names of required SLURM/munge executables that cannot be found."""
    return [b for b in REQUIRED_BINARIES if which(b) is None]


def ensure_installed(setup_script: Path = SETUP_SCRIPT, timeout: float = 900) -> str | None:
    """Run ``.ci/slurm-setup.sh`` if binaries are missing.

    Returns ``None`` when everything is available, else a human-readable reason
    (suitable for ``pytest.skip``).
    """
    if not missing_binaries():
        return None
    if os.geteuid() != 0:
        return f"SLURM binaries missing ({', '.join(missing_binaries())}) and not root"
    if not setup_script.exists():
        return f"SLURM binaries missing and {setup_script} not found"
    try:
        proc = subprocess.run(
            ["bash", str(setup_script)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{setup_script} failed: {exc}"
    missing = missing_binaries()
    if not missing:
        return None
    msg = [ln for ln in proc.stdout.splitlines() if ln.startswith("SLURM-SETUP-")]
    detail = msg[-1] if msg else (proc.stdout + proc.stderr).strip()[-500:]
    return f"SLURM binaries missing after {setup_script.name} ({', '.join(missing)}): {detail}"


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "<no log>"


def _mem_total_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise SlurmClusterError("cannot read MemTotal from /proc/meminfo")


def _hw_topology() -> str:
    """Boards/Sockets/Cores/Threads as ``slurmd -C`` sees them (``""`` if unknown).

    Declaring them avoids slurmd's "Node reconfigured socket/core boundaries".
    """
    slurmd = which("slurmd")
    if slurmd is None:
        return ""
    try:
        out = subprocess.run(
            [slurmd, "-C"], capture_output=True, text=True, timeout=20, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    keys = ("Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
    fields = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
    if not all(k in fields for k in keys):
        return ""
    return "".join(f" {k}={fields[k]}" for k in keys)


def _pids_named(name: str) -> set[int]:
    pids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() == name:
                pids.add(int(entry.name))
        except OSError:
            continue
    return pids


class SlurmCluster:
    """A single-node SLURM cluster living for the duration of a ``with`` block."""

    def __init__(
        self,
        partition: str = "ci",
        cluster_name: str = "vlbench-ci",
        n_gpus: int = 2,
        mem_reserve_mb: int = 1024,
        min_job_age_s: int = 600,
        start_timeout_s: float = 60.0,
        workdir: Path | None = None,
        cpus: int | None = None,
    ) -> None:
        self.partition = partition
        self.cluster_name = cluster_name
        self.n_gpus = n_gpus
        self.mem_reserve_mb = mem_reserve_mb
        self.min_job_age_s = min_job_age_s
        self.start_timeout_s = start_timeout_s
        self.nodename = socket.gethostname().split(".")[0]
        real_cpus = os.cpu_count() or 1
        # More CPUs than the box has (cpus > real) lets 2-thread GPU jobs run side by side on a
        # small CI machine; slurmd then trusts slurm.conf instead of draining the node.
        self.cpus = max(real_cpus, cpus or real_cpus)
        self.oversubscribed = self.cpus > real_cpus
        self.topology = (
            f" Boards=1 SocketsPerBoard=1 CoresPerSocket={self.cpus} ThreadsPerCore=1"
            if self.oversubscribed
            else _hw_topology()
        )
        self.real_memory_mb = max(256, _mem_total_mb() - mem_reserve_mb)
        self._workdir_arg = workdir
        self.workdir: Path = Path()
        self.env: dict[str, str] = dict(os.environ, PATH=_path_with_sbin())
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._backups: dict[Path, Path | None] = {}
        self._stepd_before: set[int] = set()
        self._own_munged = False
        self._started = False

    # ------------------------------------------------------------------ utils
    def run(self, *args: str, check: bool = True, timeout: float = 30) -> str:
        """Run a SLURM client command and return its stdout."""
        proc = subprocess.run(
            list(args), capture_output=True, text=True, env=self.env, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise SlurmClusterError(
                f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}"
            )
        return proc.stdout

    def logs(self) -> str:
        """Tails of the daemon logs, for error messages."""
        parts = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            parts.append(f"--- {name} ---\n{_tail(self.workdir / 'log' / name)}")
        return "\n".join(parts)

    def node_state(self) -> str:
        """State of our node as reported by ``sinfo`` (e.g. ``idle``), or ``""``."""
        try:
            out = self.run(
                "sinfo", "-h", "-N", "-n", self.nodename, "-o", "%T", check=False, timeout=10
            )
        except subprocess.TimeoutExpired:
            return ""
        return out.strip().splitlines()[0] if out.strip() else ""

    # ----------------------------------------------------------------- config
    def _fake_gpu_devices(self) -> list[str]:
        """Character devices standing in for GPUs (``gres.conf`` ``File=``)."""
        candidates = ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"]
        devs = [d for d in candidates if Path(d).is_char_device()]
        if len(devs) < self.n_gpus:
            raise SlurmClusterError(f"need {self.n_gpus} char devices, found {devs}")
        return devs[: self.n_gpus]

    def slurm_conf(self) -> str:
        """Text of ``slurm.conf`` for this cluster."""
        w = self.workdir
        def_mem = max(100, min(2048, self.real_memory_mb // max(1, self.cpus)))
        overrides = "SlurmdParameters=config_overrides\n" if self.oversubscribed else ""
        return f"""{WRITTEN_BY} -- temporary CI cluster.
ClusterName={self.cluster_name}
SlurmctldHost={self.nodename}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation={w}/state
SlurmdSpoolDir={w}/spool/slurmd
SlurmctldPidFile={w}/run/slurmctld.pid
SlurmdPidFile={w}/run/slurmd.pid
SlurmctldLogFile={w}/log/slurmctld.log
SlurmdLogFile={w}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobContainerType=job_container/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU={def_mem}
GresTypes=gpu
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge={self.min_job_age_s}
{overrides}InactiveLimit=0
KillWait=5
SlurmdTimeout=60
SlurmctldTimeout=60
MessageTimeout=20
NodeName={self.nodename} NodeAddr=127.0.0.1 CPUs={self.cpus}{self.topology} \
RealMemory={self.real_memory_mb} Gres=gpu:{self.n_gpus} State=UNKNOWN
PartitionName={self.partition} Nodes={self.nodename} Default=YES MaxTime=INFINITE State=UP
"""

    def gres_conf(self) -> str:
        """Text of ``gres.conf``: one ``gpu`` line per fake device."""
        lines = [f"{WRITTEN_BY} -- fake GPUs."]
        for dev in self._fake_gpu_devices():
            lines.append(f"NodeName={self.nodename} Name=gpu File={dev}")
        return "\n".join(lines) + "\n"

    @staticmethod
    def cgroup_conf() -> str:
        """Text of ``cgroup.conf``: keep slurm away from cgroups altogether."""
        return (
            f"{WRITTEN_BY} -- no cgroup use.\n"
            "CgroupAutomount=no\n"
            "ConstrainCores=no\n"
            "ConstrainRAMSpace=no\n"
            "ConstrainDevices=no\n"
        )

    def _write_configs(self) -> None:
        SLURM_ETC.mkdir(parents=True, exist_ok=True)
        texts = {
            "slurm.conf": self.slurm_conf(),
            "gres.conf": self.gres_conf(),
            "cgroup.conf": self.cgroup_conf(),
        }
        for name, text in texts.items():
            target = SLURM_ETC / name
            if target not in self._backups:
                backup = None
                if (target.exists() or target.is_symlink()) and not _left_by_a_killed_run(target):
                    backup = self.workdir / "etc-backup" / name
                    backup.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(target, backup, follow_symlinks=False)
                self._backups[target] = backup
            target.write_text(text)

    def _restore_configs(self) -> None:
        for target, backup in self._backups.items():
            try:
                if backup is None:
                    target.unlink(missing_ok=True)
                else:
                    target.unlink(missing_ok=True)
                    shutil.copy2(backup, target, follow_symlinks=False)
            except OSError:
                pass
        self._backups.clear()

    # ------------------------------------------------------------------ munge
    def _munge_works(self) -> bool:
        munge, unmunge = which("munge"), which("unmunge")
        if not munge or not unmunge:
            return False
        try:
            cred = subprocess.run([munge, "-n"], capture_output=True, timeout=5, check=False)
            if cred.returncode != 0:
                return False
            res = subprocess.run(
                [unmunge], input=cred.stdout, capture_output=True, timeout=5, check=False
            )
        except subprocess.TimeoutExpired:
            return False
        return res.returncode == 0

    def _start_munge(self) -> None:
        if self._munge_works():
            return  # someone else's munged: use it, leave it alone
        munged = which("munged")
        if munged is None:
            raise SlurmClusterError("munged not found")
        MUNGE_KEY.parent.mkdir(parents=True, exist_ok=True)
        if not MUNGE_KEY.exists():
            MUNGE_KEY.write_bytes(os.urandom(1024))
        for path, mode in ((MUNGE_KEY.parent, 0o700), (MUNGE_KEY, 0o400)):
            shutil.chown(path, "munge", "munge")
            path.chmod(mode)
        for d in (MUNGE_SOCKET_DIR, Path("/var/lib/munge"), Path("/var/log/munge")):
            d.mkdir(parents=True, exist_ok=True)
            shutil.chown(d, "munge", "munge")
            d.chmod(0o755 if d == MUNGE_SOCKET_DIR else 0o700)
        log = self.workdir / "log" / "munged.log"
        log.touch()
        shutil.chown(log, "munge", "munge")
        pidfile = self.workdir / "run" / "munged.pid"
        cmd = [munged, "--foreground", f"--log-file={log}", f"--pid-file={pidfile}"]
        # run as the munge user directly (not via runuser) so we can reap it
        self._procs["munged"] = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
            user="munge",
            group="munge",
            extra_groups=[],
        )
        self._own_munged = True
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self._munge_works():
                return
            if self._procs["munged"].poll() is not None:
                break
            time.sleep(0.2)
        raise SlurmClusterError(f"munged did not come up\n{_tail(log)}")

    # -------------------------------------------------------------- lifecycle
    def _spawn(self, name: str, args: list[str]) -> None:
        exe = which(args[0])
        if exe is None:
            raise SlurmClusterError(f"{args[0]} not found")
        out = open(self.workdir / "log" / f"{name}.stdout", "wb")  # noqa: SIM115
        self._procs[name] = subprocess.Popen(
            [exe, *args[1:]],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )
        out.close()

    def start(self) -> SlurmCluster:
        """Write configs, start munged/slurmctld/slurmd, wait for an idle node."""
        if os.geteuid() != 0:
            raise SlurmClusterError("must run as root")
        missing = missing_binaries()
        if missing:
            raise SlurmClusterError(f"missing binaries: {', '.join(missing)}")
        self._started = True
        try:
            if self._workdir_arg is None:
                self.workdir = Path(tempfile.mkdtemp(prefix="slurm-ci-"))
            else:
                self.workdir = self._workdir_arg
            # slurm daemons run as root but job steps must be able to traverse it
            self.workdir.chmod(0o755)
            for sub in ("state", "spool/slurmd", "run", "log"):
                (self.workdir / sub).mkdir(parents=True, exist_ok=True)
            self._write_configs()
            self._start_munge()
            self._stepd_before = _pids_named("slurmstepd")
            self._spawn("slurmctld", ["slurmctld", "-D", "-i"])
            self._wait_ctld()
            self._spawn("slurmd", ["slurmd", "-D"])
            self._wait_idle()
        except BaseException:
            self.stop()
            raise
        return self

    def _check_alive(self) -> None:
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                raise SlurmClusterError(
                    f"{name} exited with {proc.returncode}\n"
                    f"{_tail(self.workdir / 'log' / f'{name}.stdout')}\n{self.logs()}"
                )

    def _wait_ctld(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                ok = self.run("scontrol", "ping", check=False, timeout=10)
            except subprocess.TimeoutExpired:
                ok = ""
            if "is UP" in ok:
                return
            time.sleep(0.5)
        raise SlurmClusterError(f"slurmctld did not answer pings\n{self.logs()}")

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        state = ""
        while time.monotonic() < deadline:
            self._check_alive()
            state = self.node_state()
            if state == "idle":
                return
            if state.startswith(("drain", "down", "inval")) and "*" not in state:
                self.run(
                    "scontrol", "update", f"NodeName={self.nodename}", "State=RESUME", check=False
                )
            time.sleep(0.5)
        reason = self.run("sinfo", "-h", "-R", check=False)
        raise SlurmClusterError(
            f"node {self.nodename} not idle (state={state!r}, reason={reason.strip()!r})\n"
            f"{self.logs()}"
        )

    def _cancel_all_jobs(self) -> None:
        if "slurmctld" not in self._procs or self._procs["slurmctld"].poll() is not None:
            return
        try:
            self.run("scancel", "--full", "--partition", self.partition, check=False, timeout=15)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                out = self.run(
                    "squeue", "-h", "-t", "PD,R,CG,CF,S", "-o", "%i", check=False, timeout=10
                )
                if not out.strip():
                    return
                time.sleep(0.5)
        except (subprocess.TimeoutExpired, OSError):
            pass

    def stop(self) -> None:
        """Cancel jobs, kill the daemons we started, restore configs, clean up."""
        if not self._started:
            return
        self._cancel_all_jobs()
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self._procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        # slurmstepd daemonises away from slurmd; kill only ones that appeared
        # while our cluster ran.
        for pid in _pids_named("slurmstepd") - self._stepd_before:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._restore_configs()
        if self._workdir_arg is None and self.workdir != Path():
            shutil.rmtree(self.workdir, ignore_errors=True)
        self._started = False

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------- jobs
    def sbatch(self, *args: str, cwd: Path | None = None) -> str:
        """Submit with ``sbatch --parsable`` and return the job id."""
        proc = subprocess.run(
            ["sbatch", "--parsable", "-p", self.partition, *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=cwd,
            timeout=30,
            check=False,
        )
        if proc.returncode != 0:
            raise SlurmClusterError(f"sbatch failed: {proc.stderr.strip()}\n{self.logs()}")
        return proc.stdout.strip().split(";")[0]

    def job_states(self, job_ids: list[str]) -> dict[str, str]:
        """``{job_id: STATE}`` from ``squeue`` (includes recently finished jobs)."""
        out = self.run(
            "squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i %T", check=False
        )
        states = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
        return states

    def wait_jobs(self, job_ids: list[str], timeout: float = 120) -> dict[str, str]:
        """Poll ``squeue`` until all jobs reached a final state; return the states."""
        final = {
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "TIMEOUT",
            "NODE_FAIL",
            "OUT_OF_MEMORY",
            "BOOT_FAIL",
            "DEADLINE",
            "PREEMPTED",
        }
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.job_states(job_ids)
            if len(states) == len(job_ids) and all(s in final for s in states.values()):
                return states
            time.sleep(1)
        raise SlurmClusterError(f"jobs not finished in {timeout}s: {states}\n{self.logs()}")
