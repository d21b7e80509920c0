"""Fixtures shared by the test suite."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty working directory for one workflow run."""
    path = tmp_path / "work"
    path.mkdir()
    return path
