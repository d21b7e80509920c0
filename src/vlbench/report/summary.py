"""The run's front page: each paper table's coverage line, then the tables themselves."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from vlbench.atomic import write_text
from vlbench.errors import VlbenchError

NO_TABLES = "No paper table is fed by this config's benchmarks."


def coverage_lines(coverage_files: Sequence[str | Path]) -> list[str]:
    """The coverage line of every paper table, in the order given."""
    lines = []
    for path in coverage_files:
        try:
            lines.append(json.loads(Path(path).read_text(encoding="utf-8"))["line"])
        except (OSError, ValueError, KeyError) as exc:
            raise VlbenchError(f"{path}: not a paper table coverage record ({exc})") from exc
    return lines


def coverage_lines_of(markdown_path: str | Path) -> list[str]:
    """The lines of a written coverage.md, headed by where they come from (none if absent)."""
    path = Path(markdown_path)
    if not path.is_file():
        return []
    lines = [
        line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("- ")
    ]
    return [f"Paper tables ({path}):", *lines] if lines else []


def coverage_markdown(lines: Sequence[str]) -> str:
    """results/tables/coverage.md: one line per paper table."""
    body = [f"- {line}" for line in lines] or [NO_TABLES]
    return "# Coverage of the paper tables\n\n" + "\n".join(body) + "\n"


def front_page_rst(lines: Sequence[str], fragments: Sequence[str | Path]) -> str:
    """The report's first section: coverage lines, then every paper table (reStructuredText)."""
    parts = ["Paper tables", "------------", ""]
    parts += [f"- {line}" for line in lines] or [NO_TABLES]
    parts.append("")
    for path in fragments:
        parts += [Path(path).read_text(encoding="utf-8"), ""]
    return "\n".join(parts) + "\n"


def write_summary(
    coverage_files: Sequence[str | Path],
    fragments: Sequence[str | Path],
    markdown_path: str | Path,
    rst_path: str | Path,
) -> list[str]:
    """Write coverage.md and the report's front page; return the coverage lines."""
    lines = coverage_lines(coverage_files)
    write_text(markdown_path, coverage_markdown(lines))
    write_text(rst_path, front_page_rst(lines, fragments))
    return lines
