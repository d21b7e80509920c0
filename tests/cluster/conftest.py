"""Fixtures for tests that need a real (single-node, throw-away) SLURM cluster."""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from slurm_cluster import JOB_ID_REPORT, SlurmCluster, ensure_installed

# One throw-away cluster per machine at a time: /etc/slurm and the daemon ports are global.
MACHINE_LOCK = Path("/tmp/vlbench-slurm-ci.lock")
# Advertised CPUs: enough for several 2-thread jobs side by side on a 2-core CI box.
CLUSTER_CPUS = 8


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``slurm`` marker."""
    config.addinivalue_line(
        "markers",
        "slurm: needs root and a real single-node SLURM cluster started by the test "
        "(installs Debian slurm packages via .ci/slurm-setup.sh if missing)",
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the SLURM job ids every cluster test used (passing tests' output is captured)."""
    if not JOB_ID_REPORT:
        return
    terminalreporter.section("SLURM job ids")
    for test_id, summary in JOB_ID_REPORT:
        terminalreporter.write_line(f"{test_id}: {summary}")


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A running single-node SLURM cluster; daemons are stopped at session end."""
    if os.geteuid() != 0:
        pytest.skip("SLURM cluster tests need root (they write /etc/slurm and start daemons)")
    reason = ensure_installed()
    if reason is not None:
        pytest.skip(f"SLURM not available: {reason}")
    with open(MACHINE_LOCK, "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        cluster = SlurmCluster(cpus=CLUSTER_CPUS)
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()
