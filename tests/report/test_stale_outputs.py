"""Files of an earlier config are moved to results/stale/; what was left out is listed."""

from __future__ import annotations

from pathlib import Path

from vlbench.report.not_run import not_run_csv, not_run_summary
from vlbench.report.stale_outputs import move_aside, stale_outputs


def touch(root: Path, *names: str) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)


def test_only_files_the_current_config_does_not_make_are_moved_aside(tmp_path: Path) -> None:
    results = tmp_path / "results"
    touch(
        results,
        "tables/metrics.csv",
        "tables/new.md",
        "tables/old.md",
        "tables/paper/biomedflickr.md",
        "tables/.metrics.csv.x1.partial",  # a live writer's: left alone
        "plots/new/recall_at_k.png",
        "plots/old/examples/m/image_to_text.png",
        "provenance/new.csv",
        "provenance/old.html",
        "stale/tables/old.md",  # an older copy, replaced
    )
    current = ["results/tables/metrics.csv", "results/tables/new.md"]
    stale = stale_outputs(current, ["new"], results)
    assert sorted(str(path.relative_to(results)) for path in stale) == [
        "plots/old/examples/m/image_to_text.png",
        "provenance/old.html",
        "tables/old.md",
        "tables/paper/biomedflickr.md",
    ]
    moved = move_aside(stale, results)
    assert [str(new.relative_to(results)) for _, new in moved] == [
        "stale/tables/old.md",
        "stale/tables/paper/biomedflickr.md",
        "stale/plots/old/examples/m/image_to_text.png",
        "stale/provenance/old.html",
    ]
    assert (results / "stale/tables/old.md").read_text() == "tables/old.md"
    assert not (results / "plots/old").exists() and not (results / "tables/paper").exists()
    assert (results / "tables/.metrics.csv.x1.partial").exists()
    assert stale_outputs(current, ["new"], results) == []


def test_not_run_csv_and_the_last_line() -> None:
    rows = [
        {"kind": "model", "key": "cpt", "reason": "missing data", "detail": "a, b: not found"},
        {"kind": "benchmark", "key": "nabirds", "reason": "missing data", "detail": "x"},
    ]
    assert not_run_csv(rows) == (
        "kind,key,reason,detail\n"
        'model,cpt,missing data,"a, b: not found"\n'
        "benchmark,nabirds,missing data,x\n"
    )
    assert not_run_csv([]) == "kind,key,reason,detail\n"
    assert not_run_summary(rows, "results/tables/not_run.csv") == (
        "vlbench: not run: model cpt (missing data), benchmark nabirds (missing data); "
        "see results/tables/not_run.csv"
    )
    assert not_run_summary([], "x") is None
