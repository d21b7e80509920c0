"""Fault injection for tests: kill the whole workflow at a chosen point of an atomic write.

Set ``VLBENCH_CRASH_BEFORE`` to a glob pattern; the first atomic write whose final path
matches kills its process group (Snakemake and every running job) with SIGKILL just before
the temporary file would be renamed into place. Unset, this costs one environment lookup.
"""

from __future__ import annotations

import fnmatch
import os
import signal

CRASH_ENV = "VLBENCH_CRASH_BEFORE"


def crash_point(path: str) -> None:
    """SIGKILL the process group if `path` (made absolute) matches VLBENCH_CRASH_BEFORE."""
    pattern = os.environ.get(CRASH_ENV)
    if pattern and fnmatch.fnmatch(os.path.abspath(path), pattern):
        os.killpg(os.getpgrp(), signal.SIGKILL)
