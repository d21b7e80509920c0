"""The coverage lines of every paper table: coverage.md, the report's front page, the run's end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlbench.errors import VlbenchError
from vlbench.report.summary import NO_TABLES, coverage_lines_of, write_summary


def record(folder: Path, table: str, line: str) -> Path:
    path = folder / f"{table}.coverage.json"
    path.write_text(json.dumps({"table": table, "line": line}), encoding="utf-8")
    return path


def test_summary_lists_every_line_then_every_table(tmp_path: Path) -> None:
    lines = ["Table A: 3/5 published cells ours.", "Table B: 0/0 published cells ours."]
    coverage = [record(tmp_path, "a", lines[0]), record(tmp_path, "b", lines[1])]
    fragments = []
    for name in ("a", "b"):
        fragments.append(tmp_path / f"{name}.rst")
        fragments[-1].write_text(f"Table {name.upper()}\n~~~~~~~\n", encoding="utf-8")
    written = write_summary(coverage, fragments, tmp_path / "coverage.md", tmp_path / "front.rst")
    assert written == lines
    markdown = (tmp_path / "coverage.md").read_text(encoding="utf-8")
    assert markdown.splitlines()[2:] == [f"- {line}" for line in lines]
    front = (tmp_path / "front.rst").read_text(encoding="utf-8")
    assert front.index(lines[1]) < front.index("Table A\n~~~") < front.index("Table B\n~~~")
    assert coverage_lines_of(tmp_path / "coverage.md") == [
        f"Paper tables ({tmp_path / 'coverage.md'}):",
        *(f"- {line}" for line in lines),
    ]


def test_no_paper_table_says_so_and_prints_nothing(tmp_path: Path) -> None:
    write_summary([], [], tmp_path / "coverage.md", tmp_path / "front.rst")
    assert NO_TABLES in (tmp_path / "coverage.md").read_text(encoding="utf-8")
    assert coverage_lines_of(tmp_path / "coverage.md") == []
    assert coverage_lines_of(tmp_path / "absent.md") == []


def test_a_broken_coverage_record_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "t.coverage.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(VlbenchError, match=r"t.coverage.json: not a paper table coverage record"):
        write_summary([broken], [], tmp_path / "c.md", tmp_path / "f.rst")
