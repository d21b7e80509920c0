"""The parse step in one call: what `plan` decides from config files and `--config`, that it
only reads, and that it refuses a bad config in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from workflow_helpers import REPO, synthetic_benchmark, tiny_model, write_config

from vlbench.errors import VlbenchError
from vlbench.paths import METRICS_CSV, PROBE_METRICS, paper_table_file
from vlbench.planning.plan import plan

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
REFERENCE = REPO / "config" / "reference"


def files_under(root: Path) -> set[Path]:
    return set(root.rglob("*"))


def test_the_demo_plans_its_model_benchmark_paper_table_and_files(tmp_path: Path) -> None:
    before = files_under(REPO / "config")
    demo = plan([REPO / "config" / "config.yaml"], {}, SCHEMA, REFERENCE)
    assert demo.models == ["tiny-random"] and demo.benchmarks == ["synthetic-biomedflickr"]
    assert demo.paper_tables == ["biomedflickr"]
    assert METRICS_CSV in demo.all_targets
    assert paper_table_file("biomedflickr", "coverage") in demo.all_targets
    assert demo.reference_csv == str(REFERENCE / "published_results.csv")
    assert "vlbench preflight of" in demo.preflight_report and not demo.not_run_rows
    assert len(demo.metric_files) == 2 and len(demo.outcome_files) == 2  # two directions
    assert files_under(REPO / "config") == before  # no lock file written: planning only reads


def test_overrides_and_missing_local_data_shape_the_plan(tmp_path: Path) -> None:
    config = {
        "models": {"tiny": tiny_model()},
        "benchmarks": {
            "demo": synthetic_benchmark(20),
            "gone": {"protocol": "paired", "source": {"path": str(tmp_path / "nowhere")}},
        },
    }
    overrides = {"metrics": {"confidence": 0.9}}
    planned = plan([write_config(tmp_path, config)], overrides, SCHEMA, REFERENCE)
    assert planned.config["metrics"]["confidence"] == 0.9
    assert planned.benchmarks == ["demo"]  # missing_data: skip leaves "gone" out
    assert planned.not_run == {"models": [], "benchmarks": ["gone"]}
    assert [row["key"] for row in planned.not_run_rows] == ["gone"]


def test_probe_files_join_the_metric_files(tmp_path: Path) -> None:
    rare = {
        "protocol": "zeroshot",
        "source": {"synthetic": {"pairs": 20, "seed": 0}},
        "probe": {"logistic": {"shots": [2]}},
    }
    config = {"models": {"tiny": tiny_model()}, "benchmarks": {"rare": rare}}
    planned = plan([write_config(tmp_path, config)], {}, SCHEMA, REFERENCE)
    probe = PROBE_METRICS.format(model="tiny", benchmark="rare", classifier="logistic")
    assert probe in planned.metric_files and probe not in planned.outcome_files


def test_a_bad_config_is_refused_in_one_line(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"models": {}, "benchmarks": {}, "unknown_key": 1})
    with pytest.raises(VlbenchError) as error:
        plan([path], {}, SCHEMA, REFERENCE)
    assert len(str(error.value).splitlines()) == 1
