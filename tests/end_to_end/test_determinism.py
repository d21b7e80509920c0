"""Two clean runs on the CPU give byte-identical embeddings and tables."""

from __future__ import annotations

from pathlib import Path

from workflow_helpers import run_in_own_session, small_demo, write_config

COMPARED = ["results/embeddings", "results/ranks", "results/tables"]


def files_under(root: Path) -> dict[str, bytes]:
    """Relative path -> content of every finished file below the compared folders."""
    found = {}
    for folder in COMPARED:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and path.suffix != ".json" and not path.name.startswith("."):
                found[str(path.relative_to(root))] = path.read_bytes()
    return found


def test_two_clean_runs_are_byte_identical(small_demo_run: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "second"
    workdir.mkdir()
    write_config(workdir, small_demo())
    result = run_in_own_session(workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = files_under(small_demo_run), files_under(workdir)
    assert any(name.endswith(".npy") for name in first)
    assert any(name.endswith("metrics.csv") for name in first)
    assert sorted(first) == sorted(second)
    different = [name for name in first if first[name] != second[name]]
    assert not different, f"differ between two clean runs: {different}"
