"""User-supplied files a config names but that are missing: a warning at plan time, a failed job.

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
def test_missing_user_files_warn_at_plan_time_and_fail_the_job(
    tmp_path: Path, missing: str
) -> None:
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
    plan = run_workflow(tmp_path, configfile, "-n")
    assert f"benchmarks.cornell.source.{missing}: not found" in plan.stdout + plan.stderr
    result = run_workflow(tmp_path, configfile, "results/data/cornell/images.parquet", check=False)
    assert result.returncode != 0
    assert "not-there" in result.stdout + result.stderr
