"""`vlbench clean` removes one model's stage folders and the tables' metrics.csv, nothing else."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from vlbench.errors import VlbenchError
from vlbench.planning.clean_command import clean


def test_clean_removes_the_models_folders_and_the_tables_csv_only(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for stage in ("embeddings", "index", "ranks", "metrics"):
        for model in ("m", "other"):
            (results / stage / model / "b").mkdir(parents=True)
    (results / "tables").mkdir()
    (results / "tables" / "metrics.csv").write_text("x")
    (results / "data" / "b").mkdir(parents=True)
    assert clean("m", "b", results, io.StringIO()) == 4
    assert not any((results / stage / "m" / "b").exists() for stage in ("embeddings", "metrics"))
    assert (results / "embeddings" / "other" / "b").is_dir() and (results / "data" / "b").is_dir()
    assert not (results / "tables" / "metrics.csv").exists()
    with pytest.raises(VlbenchError, match="nothing of m/b under"):
        clean("m", "b", results, io.StringIO())


@pytest.mark.parametrize("key", ["../x", "a/b", "..", ""])
def test_a_key_that_could_leave_results_is_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(VlbenchError, match="not a model or benchmark key"):
        clean(key, None, tmp_path, io.StringIO())
