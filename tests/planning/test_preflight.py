"""data_root, the preflight table, and leaving out entries whose local data is missing."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from workflow_helpers import run_workflow, synthetic_benchmark, tiny_model, validate, write_config

from vlbench.cli import main as cli_main
from vlbench.errors import VlbenchError
from vlbench.planning import preflight as pf
from vlbench.planning.data_root import expand_data_root
from vlbench.planning.lockfile import Pin
from vlbench.planning.preflight_command import preflight

A = "a" * 40


def mixed_config(root: Path, **top: Any) -> dict[str, Any]:
    """One entry of every state: pinned, first use, generated, present, missing."""
    (root / "present").mkdir(parents=True, exist_ok=True)
    return {
        "data_root": str(root),
        "models": {
            "pinned": {"name": "hf-hub:org/pinned", "revision": A},
            "first-use": {"name": "hf-hub:org/new"},
            "random": tiny_model(),
            "missing-ckpt": {"name": "ViT-B-16", "pretrained": "{data_root}/ckpt/absent.pt"},
        },
        "benchmarks": {
            "synthetic": synthetic_benchmark(10),
            "hub": {"protocol": "paired", "source": {"repo": "org/data"}},
            "present": {"protocol": "paired", "source": {"path": "{data_root}/present"}},
            "absent": {
                "protocol": "zeroshot",
                "source": {"path": "{data_root}/nabirds", "annotations": "metadata.csv"},
            },
        },
        **top,
    }


def test_data_root_is_expanded_in_local_paths_only(tmp_path: Path) -> None:
    config = expand_data_root(validate(mixed_config(tmp_path)))
    assert config["models"]["missing-ckpt"]["pretrained"] == f"{tmp_path}/ckpt/absent.pt"
    assert config["benchmarks"]["absent"]["source"]["path"] == f"{tmp_path}/nabirds"
    assert config["benchmarks"]["absent"]["source"]["annotations"] == "metadata.csv"
    plain = validate({"models": {"m": tiny_model()}, "benchmarks": {"s": synthetic_benchmark()}})
    assert plain["data_root"] == "data" and plain["missing_data"] == "skip"
    empty = validate(mixed_config(tmp_path, data_root=""))
    with pytest.raises(VlbenchError, match=r"models.missing-ckpt.pretrained uses \{data_root\}"):
        expand_data_root(empty)


def test_every_entry_gets_one_row_with_its_state(tmp_path: Path) -> None:
    config = expand_data_root(validate(mixed_config(tmp_path)))
    rows = {row.key: row for row in pf.preflight_rows(config, {"dataset org/data": Pin(A)})}
    assert {key: row.state for key, row in rows.items()} == {
        "pinned": "pinned",
        "first-use": "will pin on first use",
        "random": "generated",
        "missing-ckpt": "not run: missing",
        "synthetic": "generated",
        "hub": "locked",
        "present": "local files present",
        "absent": "not run: missing",
    }
    assert rows["absent"].detail == (
        f"benchmarks.absent.source.path: directory not found: {tmp_path}/nabirds "
        "(needs a metadata CSV (filepath,class or the named columns) + the images)"
    )
    assert rows["hub"].detail == "dataset org/data @ aaaaaaaaaaaa"
    table = pf.render(list(rows.values()), "title:")
    assert table.splitlines()[0] == "title:" and len(table.splitlines()) == 2 + len(rows)


def test_missing_entries_are_left_out_or_refused_when_asked_for(tmp_path: Path) -> None:
    config = expand_data_root(validate(mixed_config(tmp_path)))
    rows = pf.preflight_rows(config, {})
    pf.refuse_missing(config, rows)  # skip: left out, not refused
    kept, rows = pf.drop_missing(config, rows)
    assert set(kept["models"]) == {"pinned", "first-use", "random"}
    assert set(kept["benchmarks"]) == {"synthetic", "hub", "present"}
    assert pf.not_run_rows(rows) == [
        {
            "kind": "model",
            "key": "missing-ckpt",
            "reason": "missing data",
            "detail": f"models.missing-ckpt.pretrained: file not found: {tmp_path}/ckpt/absent.pt",
        },
        {
            "kind": "benchmark",
            "key": "absent",
            "reason": "missing data",
            "detail": rows[-1].detail,
        },
    ]
    asked = expand_data_root(validate(mixed_config(tmp_path, missing_data="fail")))
    rows = pf.preflight_rows(asked, {})
    assert {row.state for row in rows if row.missing} == {"missing"}
    with pytest.raises(VlbenchError) as refused:
        pf.refuse_missing(asked, rows)
    assert str(refused.value).startswith(
        "missing_data: fail, and 2 entries miss their local data: model missing-ckpt: "
        f"models.missing-ckpt.pretrained: file not found: {tmp_path}/ckpt/absent.pt; "
        f"benchmark absent: benchmarks.absent.source.path: directory not found: {tmp_path}/nabirds"
    )


@pytest.mark.parametrize("section", ["models", "benchmarks"])
def test_a_config_whose_models_or_benchmarks_are_all_missing_is_refused(
    tmp_path: Path, section: str
) -> None:
    config = mixed_config(tmp_path)
    kept = {"models": "missing-ckpt", "benchmarks": "absent"}[section]
    config[section] = {kept: config[section][kept]}
    config = expand_data_root(validate(config))
    with pytest.raises(VlbenchError) as refused:
        pf.refuse_missing(config, pf.preflight_rows(config, {}))
    message = str(refused.value)
    assert message.startswith(f"nothing to run: every {section[:-1]} misses its local data: ")
    assert f"{tmp_path}/" in message and "\n" not in message


def test_vlbench_preflight_prints_the_table(tmp_path: Path, capsys) -> None:
    path = write_config(tmp_path, mixed_config(tmp_path / "root"), "mine.yaml")
    out = io.StringIO()
    assert preflight(path, out=out) == 1  # something is missing
    lines = out.getvalue().splitlines()
    assert lines[0] == f"vlbench preflight of {path} (lock: {tmp_path / 'mine.lock'}):"
    assert any("absent" in line and "not run: missing" in line for line in lines)
    (tmp_path / "other" / "nabirds").mkdir(parents=True)
    (tmp_path / "other" / "nabirds" / "metadata.csv").write_text("filepath,class\n")
    (tmp_path / "other" / "ckpt").mkdir()
    (tmp_path / "other" / "ckpt" / "absent.pt").write_bytes(b"x")
    (tmp_path / "other" / "present").mkdir()
    assert cli_main(["preflight", str(path), "--data-root", str(tmp_path / "other")]) == 0
    assert "not run" not in capsys.readouterr().out
    assert cli_main(["preflight", str(tmp_path / "absent.yaml")]) == 2


def test_a_dry_run_prints_one_table_and_plans_no_job_for_missing_data(tmp_path: Path) -> None:
    config = {
        "models": {"tiny": tiny_model()},
        "benchmarks": {
            "demo": synthetic_benchmark(10),
            "gone": {"protocol": "paired", "source": {"path": "{data_root}/gone"}},
        },
    }
    result = run_workflow(tmp_path, write_config(tmp_path, config), "-n")
    output = result.stdout + result.stderr
    assert output.count("vlbench preflight of") == 1 and "warning" not in output.lower()
    assert "gone" in output and "not run: missing" in output
    assert "results/data/gone" not in output and "results/data/demo" in output


def test_paper_tables_note_what_was_not_run(tmp_path: Path) -> None:
    from workflow_helpers import SHIPPED_MAP

    from vlbench.report.paper_layouts import LAYOUTS
    from vlbench.report.paper_tables import _not_run_notes
    from vlbench.report.reference import read_map

    config = expand_data_root(validate(mixed_config(tmp_path)))
    _, rows = pf.drop_missing(config, pf.preflight_rows(config, {}))
    assert pf.not_run(rows) == {"models": ["missing-ckpt"], "benchmarks": ["absent"]}
    missing = {"models": ["cpt-vit-l-14"], "benchmarks": ["nabirds", "flickr30k-full"]}
    notes = _not_run_notes(LAYOUTS["biocap-table1"], read_map(SHIPPED_MAP), missing)
    assert notes == [
        "Not run (benchmark data missing, see `vlbench preflight`): nabirds.",
        "Not run (model data missing, see `vlbench preflight`): cpt-vit-l-14.",
    ]
