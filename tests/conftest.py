"""Fixtures shared by the test suite."""

from __future__ import annotations

import fcntl
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback_hub import loopback_hub  # noqa: F401 (the fixture, for every test)
from workflow_helpers import run_watching_processes, write_shared_demo

from vlbench.hashing import CHECKSUM_CACHE_ENV

# Under pytest-xdist (`make test` runs two workers) the tests are handed out a module at a time,
# so a module's own finished run (module fixtures) is made once, and every SLURM test runs on
# one worker (one cluster per machine). The units of over a minute go first, so that none of
# them forms the tail: the SLURM tests, which mostly wait on the cluster's status checks, then the
# unreachable hub's test, which waits on the hub client's retries, on one worker (a worker's
# first and third units) beside biocap's fixture run on the other, which keeps both cores busy;
# then the others, longest first (benchmarks/RESULTS.md, `Test suite`).
SHARED_SCOPES = ("tests/cluster/",)
LONGEST_FIRST = (
    "tests/cluster/",
    "tests/end_to_end/test_shipped_biocap.py",
    "tests/data/test_unreachable_hub.py",
    "tests/end_to_end/test_rerun_matrix.py",
    "tests/end_to_end/test_shipped_small_configs.py",
    "tests/end_to_end/test_shipped_retrieval_classic.py",
    "tests/end_to_end/",
)


def _start_rank(item: pytest.Item) -> int:
    """Where an item's unit stands in LONGEST_FIRST (after all of it when it is not there)."""
    for rank, prefix in enumerate(LONGEST_FIRST):
        if item.nodeid.startswith(prefix):
            return rank
    return len(LONGEST_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the units of LONGEST_FIRST first, in its order, then the other whole-workflow tests
    (a stable sort: the same order on every worker)."""
    items.sort(key=_start_rank)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Hand out work a module at a time, all of tests/cluster/ as one unit, in collection order."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            for shared in SHARED_SCOPES:
                if nodeid.startswith(shared):
                    return shared
            return super()._split_scope(nodeid)

    config.option.loadscopereorder = False
    return ModuleScheduling(config, log)


@pytest.fixture(scope="session", autouse=True)
def checksum_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Weights' remembered checksums (vlbench.hashing) go to this session's own folder, for
    the tests' processes and the workflow runs they start, never to the user's cache."""
    folder = tmp_path_factory.mktemp("checksums")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CHECKSUM_CACHE_ENV, str(folder))
        yield folder


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty working directory for one workflow run."""
    path = tmp_path / "work"
    path.mkdir()
    return path


def session_root(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """A folder every pytest-xdist worker of this session sees (the base temp when serial)."""
    base = tmp_path_factory.getbasetemp()
    return base if worker_id == "master" else base.parent


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """One uninterrupted run of the shared demo and its HTML report, made once per session.

    Under pytest-xdist the first worker to ask makes it while the others wait on a file lock,
    so it is made once, not once per worker. Tests only read it; a test that changes files
    works on a copy (`copy_of_run`).
    """
    root = session_root(tmp_path_factory, worker_id)
    workdir, finished = root / "demo-run", root / "demo-run.finished"
    with open(root / "demo-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not finished.exists():
            shutil.rmtree(workdir, ignore_errors=True)  # a failed attempt's leftovers
            workdir.mkdir()
            write_shared_demo(workdir)
            # Every process the two runs start is watched: `demo_leftovers` lists any left.
            for extra, name in (((), "run"), (("--report", "results/report.html"), "report")):
                leftovers = root / f"demo-run.{name}.leftovers.json"
                result = run_watching_processes(workdir, leftovers, *extra)
                assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
            finished.touch()
    return workdir
