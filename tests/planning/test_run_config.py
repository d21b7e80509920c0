"""The config a run plans with: relative paths against the file that writes them, `--config`
typed by the schema (nested YAML/JSON values, dotted keys), errors naming who wrote the value."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from workflow_helpers import REPO, run_workflow, synthetic_benchmark, tiny_model, write_config

from vlbench.config import load_schema
from vlbench.errors import VlbenchError
from vlbench.planning.checks import check_model_keys
from vlbench.planning.config_overrides import parse_assignments, typed_overrides
from vlbench.planning.config_paths import resolve_written_paths
from vlbench.planning.run_config import load_run_config

SCHEMA = load_schema()


def snakemake_config(*assignments: str) -> dict:
    """What Snakemake's own command line makes of `--config` (its parser, as it runs)."""
    from snakemake.cli import parse_config

    return parse_config(list(assignments))


def minimal_config() -> dict:
    return {"models": {"tiny": tiny_model()}, "benchmarks": {"demo": synthetic_benchmark()}}


@pytest.fixture
def mine(tmp_path: Path) -> Path:
    (tmp_path / "configs").mkdir()
    return write_config(tmp_path / "configs", minimal_config(), "mine.yaml")


# --- relative paths ---------------------------------------------------------------------------


def test_paths_written_in_a_file_are_relative_to_its_folder(tmp_path: Path) -> None:
    folder, cwd = tmp_path / "configs", tmp_path / "run"
    raw = {
        "data_root": "../data",
        "models": {
            "a": {"name": "x", "model_config": "models/x.json", "pretrained": "w/x.pt"},
            "b": {"name": "local-dir:repos/b"},
            "c": {"name": "ViT-B-16", "pretrained": "openai"},
            "d": {"name": "y", "pretrained": "{data_root}/y.pt", "model_config": "/abs/y.json"},
        },
        "benchmarks": {"s": {"source": {"path": "bench", "annotations": "a.csv"}}},
        "tables": {"map": "map.yaml", "reference": None},
    }
    resolved = resolve_written_paths(raw, folder, cwd)
    assert resolved["data_root"] == str(tmp_path / "data")  # outside the working dir: absolute
    assert resolved["models"]["a"] == {
        "name": "x",
        "model_config": str(folder / "models/x.json"),
        "pretrained": str(folder / "w/x.pt"),
    }
    assert resolved["models"]["b"]["name"] == f"local-dir:{folder / 'repos/b'}"
    assert resolved["models"]["c"] == raw["models"]["c"]  # a tag, not a path
    assert resolved["models"]["d"] == raw["models"]["d"]  # under data_root, or absolute
    # The source folder moves; its annotation file stays relative to the source folder.
    assert resolved["benchmarks"]["s"]["source"] == {
        "path": str(folder / "bench"),
        "annotations": "a.csv",
    }
    assert resolved["tables"] == {"map": str(folder / "map.yaml"), "reference": None}
    # A config inside the working directory: written relative to it, so its params (and the
    # reruns) do not depend on where the directory is; in its own folder: unchanged.
    inside = resolve_written_paths(raw, cwd / "configs", cwd)
    assert inside["models"]["a"]["model_config"] == "configs/models/x.json"
    assert resolve_written_paths(raw, cwd, cwd) == raw


def test_the_shipped_demo_names_its_model_file_from_any_working_directory(
    tmp_path: Path,
) -> None:
    config = load_run_config([REPO / "config" / "config.yaml"], cwd=tmp_path)
    model_config = Path(config["models"]["tiny-random"]["model_config"])
    assert model_config == REPO / "config" / "models" / "vlbench-tiny.json"
    assert model_config.is_file()
    from_checkout = load_run_config(["config/config.yaml"], cwd=REPO)
    assert from_checkout["models"]["tiny-random"]["model_config"] == (
        "config/models/vlbench-tiny.json"  # as before: the demo's results rerun nothing
    )


def test_command_line_paths_are_relative_to_the_working_directory(
    mine: Path, tmp_path: Path
) -> None:
    config = load_run_config([mine], {"data_root": "big"}, cwd=tmp_path / "run")
    assert config["data_root"] == "big"  # the working directory's, as results/ is
    assert load_run_config([mine], cwd=tmp_path / "run")["data_root"] == "data"  # the default


# --- --config values ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "assignment",
    [
        "embedding={batch_size: 32, pixel_cache: false, num_workers: null}",
        'embedding={"batch_size": 32, "pixel_cache": false, "num_workers": null}',
    ],
    ids=["yaml", "json"],
)
def test_nested_values_from_snakemakes_command_line_take_the_schemas_types(
    assignment: str, mine: Path
) -> None:
    overrides = snakemake_config(assignment)
    assert overrides["embedding"]["batch_size"] == "32"  # Snakemake hands a string over
    config = load_run_config([mine], overrides)
    assert config["embedding"]["batch_size"] == 32
    assert config["embedding"]["pixel_cache"] is False
    assert config["embedding"]["num_workers"] is None
    assert config["embedding"]["shard_size"] == 10000  # the rest keeps its defaults


def test_every_kind_of_setting_is_typed(mine: Path) -> None:
    overrides = snakemake_config(
        "prepare={threads: 3}",
        "metrics={confidence: 0.9, bootstrap_samples: 0, notebook_columns: true}",
        "benchmarks={demo: {k: [1, 5], source: {synthetic: {pairs: 12}}}}",
        "models={tiny: {precision: bf16}}",
        "tables={reference: null}",
        "missing_data=fail",
    )
    config = load_run_config([mine], overrides)
    assert config["prepare"]["threads"] == 3
    assert config["metrics"]["confidence"] == 0.9 and config["metrics"]["bootstrap_samples"] == 0
    assert config["metrics"]["notebook_columns"] is True
    assert config["benchmarks"]["demo"]["k"] == [1, 5]
    assert config["benchmarks"]["demo"]["source"]["synthetic"] == {"pairs": 12, "seed": 0}
    assert config["models"]["tiny"]["precision"] == "bf16"
    assert config["models"]["tiny"]["random_init_seed"] == 0  # merged, not replaced
    assert config["tables"]["reference"] is None and config["missing_data"] == "fail"


def test_dotted_keys_set_nested_settings() -> None:
    overrides = parse_assignments(["embedding.batch_size=32", "models.tiny.precision=bf16"])
    assert overrides == {
        "embedding": {"batch_size": "32"},
        "models": {"tiny": {"precision": "bf16"}},
    }
    assert typed_overrides(overrides, SCHEMA)["embedding"] == {"batch_size": 32}
    with pytest.raises(VlbenchError, match=r"^--config 'embedding\.=3': expected key=value"):
        parse_assignments(["embedding.=3"])


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        (
            "embedding={batch_size: many}",
            "--config: invalid value at 'embedding.batch_size': 'many' is not of type 'integer'",
        ),
        (
            "embedding={batchsize: 32}",
            "--config: unknown key 'batchsize' at 'embedding' (allowed: batch_size, ",
        ),
        ("pins=sometimes", "--config: invalid value at 'pins': 'sometimes' is not one of"),
        ("models={tiny: {precision: fp64}}", "--config: invalid value at 'models.tiny.precision'"),
    ],
)
def test_a_bad_command_line_value_names_config_not_the_file(
    assignment: str, message: str, mine: Path
) -> None:
    with pytest.raises(VlbenchError) as error:
        load_run_config([mine], snakemake_config(assignment))
    assert str(error.value).startswith(message), str(error.value)


def test_a_bad_value_in_a_file_names_the_file_that_wrote_it(mine: Path, tmp_path: Path) -> None:
    broken = minimal_config()
    broken["embedding"] = {"batch_size": "many"}
    second = write_config(tmp_path, broken, "second.yaml")
    with pytest.raises(VlbenchError) as error:
        load_run_config([mine, second], snakemake_config("prepare={threads: 3}"))
    assert str(error.value).startswith(f"{second}: invalid value at 'embedding.batch_size'")


def test_a_yaml_error_in_a_config_file_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("models:\n  tiny: {name: x\nbenchmarks: {}\n", encoding="utf-8")
    with pytest.raises(VlbenchError) as error:
        load_run_config([path])
    assert str(error.value).startswith(f"{path}: not valid YAML")
    assert "line 3" in str(error.value)


def test_config_overrides_work_through_snakemake(tmp_path: Path) -> None:
    """A dry run with a nested override plans; a bad one names --config in one line."""
    path = write_config(tmp_path, minimal_config())
    fine = run_workflow(tmp_path, path, "-n", "--config", "embedding={batch_size: 32}")
    assert "Job stats" in fine.stdout + fine.stderr
    bad = run_workflow(tmp_path, path, "-n", "--config", "embedding={batch_size: x}", check=False)
    assert bad.returncode != 0
    output = bad.stdout + bad.stderr
    assert "--config: invalid value at 'embedding.batch_size': 'x' is not of type 'integer'" in (
        output
    )
    assert str(path) not in output.split("--config: invalid value")[0].splitlines()[-1]


# --- open_clip tags -----------------------------------------------------------------------------


def test_an_open_clip_tag_of_another_architecture_is_refused_at_plan_time() -> None:
    config = {"models": {"b16": {"name": "ViT-B-16", "pretrained": "laion2b_s34b_b79k"}}}
    with pytest.raises(VlbenchError) as error:
        check_model_keys(config)
    message = str(error.value)
    assert message.startswith(
        "models.b16: open_clip has no pretrained tag 'laion2b_s34b_b79k' for 'ViT-B-16'; its "
        "tags: commonpool_l_basic_s1b_b8k, "
    )
    assert "laion2b_s34b_b88k" in message and "openai" in message
    unknown = {"models": {"x": {"name": "vlbench-tiny", "pretrained": "openai"}}}
    with pytest.raises(VlbenchError, match=r"^models\.x: open_clip has no pretrained weights for"):
        check_model_keys(unknown)
    check_model_keys({"models": {"ok": {"name": "ViT-B-16", "pretrained": "LAION2B-S34B-B88K"}}})


def test_refusing_a_tag_imports_no_model_library() -> None:
    code = (
        "import sys\nfrom vlbench.planning.checks import check_model_keys\n"
        "from vlbench.errors import VlbenchError\n"
        "try:\n"
        "    check_model_keys({'models': {'m': {'name': 'ViT-B-16', 'pretrained': 'nope'}}})\n"
        "except VlbenchError as error:\n"
        "    print(error)\n"
        "print(sorted(m for m in ('torch', 'open_clip') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    refused, imported = result.stdout.splitlines()
    assert refused.startswith("models.m: open_clip has no pretrained tag 'nope'")
    assert imported == "[]"


def test_the_schema_types_match_json_round_trips() -> None:
    """Values Snakemake already typed (top-level numbers and booleans) pass unchanged."""
    overrides = snakemake_config("data_root=/big/disk")
    assert typed_overrides(overrides, SCHEMA) == {"data_root": "/big/disk"}
    assert json.loads(json.dumps(typed_overrides({"metrics": {"seed": "3"}}, SCHEMA))) == {
        "metrics": {"seed": 3}
    }
