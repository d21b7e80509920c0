"""How a run ends on the terminal: its causes as the last lines, and Ctrl-C as one line, exit 130.

Snakemake prints its own lines after the `onerror` hook ("Complete log", "At least one job did
not complete successfully"), so a failed job's cause would sit above them: `say_last` keeps the
lines and prints them when the process exits, after everything else.

Ctrl-C reaches every process of the terminal's foreground group: Snakemake, each job process and
each rule script, and every Python process among them prints a KeyboardInterrupt traceback (60
lines for one embedding job) before Snakemake exits with status 1. `stop_cleanly_on_interrupt`
(called once, in the main process, while the Snakefile is parsed) changes that:

- every thread the main process starts from then on blocks SIGINT, so the jobs it spawns, and
  everything they spawn, inherit a blocked SIGINT: the key reaches the main process alone;
- on the first Ctrl-C the main process silences its own output, stops the processes it started
  (SIGTERM: they end at once and print nothing) and lets Snakemake's own interrupt handling run
  (cancel the jobs, mark their outputs incomplete, release its locks);
- when the process exits it prints one line (`INTERRUPTED`) and exits with status 130, the
  shell's code for "ended by SIGINT". A second Ctrl-C kills what is left at once.

Nothing a stopped job half-wrote counts as finished (vlbench.atomic writes through a partial
file; Snakemake marks the job's outputs incomplete), and the default profile's
`rerun-incomplete` makes the same command resume the run.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from types import FrameType

INTERRUPTED_EXIT_STATUS = 128 + signal.SIGINT
INTERRUPTED = (
    "vlbench: interrupted (Ctrl-C): the running jobs were stopped and nothing they half-wrote "
    "is kept; the same command resumes the run"
)

_LAST_LINES: list[str] = []
_STATE: dict[str, int | bool] = {"interrupted": False, "armed": False, "end_registered": False}


def say_last(lines: Iterable[str]) -> None:
    """Print `lines` on standard error when the process exits, after everything else."""
    _LAST_LINES.extend(lines)
    _register_end()


def interrupted() -> bool:
    """True once this process has seen Ctrl-C."""
    return bool(_STATE["interrupted"])


def stop_cleanly_on_interrupt() -> None:
    """Make Ctrl-C stop this run with one line and exit status 130 (see the module docstring)."""
    if _STATE["armed"]:
        return
    _STATE["armed"] = True
    threading.setprofile(_block_interrupts_in_this_thread)
    signal.signal(signal.SIGINT, _on_interrupt)
    _register_end()


def descendants(pid: int) -> list[int]:
    """The process ids of every live process below `pid` (nearest first)."""
    children: dict[int, list[int]] = {}
    for child, parent in _parent_pairs():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    queue = list(children.get(pid, []))
    while queue:
        child = queue.pop(0)
        found.append(child)
        queue.extend(children.get(child, []))
    return found


def _parent_pairs() -> list[tuple[int, int]]:
    """(pid, parent pid) of every process: from /proc on Linux, else from `ps`."""
    if os.path.isdir("/proc/self"):
        pairs = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            pairs.append((int(entry), int(fields[1])))
        return pairs
    listing = subprocess.run(
        ["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True, check=False
    ).stdout
    return [(int(a), int(b)) for a, b in (line.split() for line in listing.splitlines() if line)]


def _signal_all(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):  # already ended
            os.kill(pid, signum)


def _block_interrupts_in_this_thread(*_: object) -> None:
    """The first call in every new thread: block SIGINT there (its children inherit it)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    sys.setprofile(None)


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    if _STATE["interrupted"]:
        _signal_all(descendants(os.getpid()), signal.SIGKILL)
        _finish()
    _STATE["interrupted"] = True
    _silence_output()
    _signal_all(descendants(os.getpid()), signal.SIGTERM)
    raise KeyboardInterrupt


def _silence_output() -> None:
    """From now on this process's standard output and error go nowhere; the final line is
    written to a copy of standard error kept aside."""
    sys.stdout.flush()
    sys.stderr.flush()
    _STATE["stderr"] = os.dup(2)
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    os.close(quiet)


def _register_end() -> None:
    if not _STATE["end_registered"]:
        _STATE["end_registered"] = True
        atexit.register(_finish)


def _finish() -> None:
    """At exit: the kept lines last; after Ctrl-C, the interrupt line and exit status 130."""
    if not _STATE["interrupted"]:
        if _LAST_LINES:
            sys.stdout.flush()
            sys.stderr.write("".join(f"{line}\n" for line in _LAST_LINES))
            sys.stderr.flush()
        return
    logging.shutdown()  # the run's log file gets its last lines
    fd = int(_STATE.get("stderr", 2))
    os.write(fd, f"{INTERRUPTED}\n".encode())
    os._exit(INTERRUPTED_EXIT_STATUS)
