"""User-supplied files a config names but that are missing: refused at plan time, no job planned.

Every source layout running through the whole workflow to the paper tables is the job of the
shipped-config tests (tests/end_to_end/test_shipped_*.py), which read each format from its
miniature in the real layout.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_sources import (
    write_annotation_pairs,
)
from workflow_helpers import run_workflow, tiny_model, write_config


@pytest.mark.parametrize("missing", ["annotations", "images"])
def test_missing_user_files_are_refused_at_plan_time(tmp_path: Path, missing: str) -> None:
    write_annotation_pairs(tmp_path / "cornell", n=4)
    source = {
        "path": str(tmp_path / "cornell"),
        "format": "annotation_csv",
        "annotations": "annotations.csv",
        "images": "images",
    }
    source[missing] = f"not-there-{missing}"
    config = {
        "models": {"tiny": tiny_model()},
        "benchmarks": {"cornell": {"protocol": "paired", "source": source}},
    }
    configfile = write_config(tmp_path, config)
    plan = run_workflow(tmp_path, configfile, "-n", check=False)
    assert plan.returncode != 0
    path = tmp_path / "cornell" / f"not-there-{missing}"
    assert (
        f"nothing to run: every benchmark misses its local data: benchmark cornell: "
        f"benchmarks.cornell.source.{missing}: not found: {path}"
    ) in plan.stdout + plan.stderr
    assert not (tmp_path / "logs").exists()  # no job was planned to fail on it
