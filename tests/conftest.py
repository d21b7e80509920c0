"""Fixtures shared by the test suite."""

from __future__ import annotations

from pathlib import Path

import pytest
from workflow_helpers import run_in_own_session, small_demo, write_config


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty working directory for one workflow run."""
    path = tmp_path / "work"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def small_demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted run of the small demo, shared by the fault and determinism tests."""
    workdir = tmp_path_factory.mktemp("small-demo")
    write_config(workdir, small_demo())
    result = run_in_own_session(workdir)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return workdir
