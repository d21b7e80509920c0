"""A run's claim on its working directory, and the Snakemake locks a dead run left behind.

Snakemake locks a working directory with files (`.snakemake/locks/<n>.{input,output}.lock`)
that a run killed with SIGKILL, or whose node died, never removes: the next run then stops
with a LockException until `--unlock`, and nothing tells a stale lock from a live run's. So the
main process of every vlbench run also holds a kernel lock (flock) on
`.snakemake/vlbench-run.lock` for as long as it lives; the kernel drops it when the process
ends, however it ends, and no child inherits it. A run that can take that lock knows no other
vlbench run is alive in the directory: Snakemake lock files found then are a dead run's, and
they are removed (each named on one line) before Snakemake looks for them. A run that cannot
take it leaves them alone: the live run's lock stops it as before.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

CLAIM = "vlbench-run.lock"
# The claim's descriptor, open for the life of the process (closing it would drop the flock).
_HELD: list[int] = []


def claim_directory(snakemake_dir: str | Path = ".snakemake") -> list[str]:
    """Hold this process's claim; when no live run holds one, remove the Snakemake locks a dead
    run left and return one line per removed file (none: nothing stale, or another run lives)."""
    if _HELD:
        return []
    folder = Path(snakemake_dir)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / CLAIM, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)  # a live run holds it (or the file system has no locks): touch nothing
        return []
    _HELD.append(fd)
    removed = []
    for lock in sorted((folder / "locks").glob("*.lock")):
        lock.unlink(missing_ok=True)
        removed.append(
            f"vlbench: removed {lock}, a lock of an earlier run that did not end (no run holds "
            "this directory now); its incomplete outputs are made again"
        )
    return removed
