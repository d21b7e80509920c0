"""Every fact pinned in a shipped config (a commit, a checksum, expected counts, column names) has
its public source written beside it: in the comment block directly above it, or inline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CONFIG_DIR = Path(__file__).resolve().parents[1] / "config"

# `key: <40 or 64 hex>` (a commit or a sha256), optionally a list item, quoted or commented.
HEX_LINE = re.compile(
    r"^\s*(?:-\s+)?(?:[\w.-]+:\s*)?[\"']?(?P<hex>[0-9a-f]{64}|[0-9a-f]{40})[\"']?\s*(?:#.*)?$"
)
FACT_LINE = re.compile(r"^\s*(?:-\s+)?(?:expected|columns):")
SOURCE = re.compile(r"Source:.*?(?:github\.com/|huggingface\.co/|https?://)", re.DOTALL)
PIN = re.compile(r"(?:commit|@)\s*[0-9a-f]{12,40}")
URL = r"(?:https?://|github\.com/|huggingface\.co/)\S*"


def comment_above(lines: list[str], index: int) -> str:
    """The contiguous `#` block directly above line `index` plus its inline comment, one string."""
    block: list[str] = []
    i = index - 1
    while i >= 0 and lines[i].lstrip().startswith("#"):
        block.insert(0, lines[i].lstrip()[1:].strip())
        i -= 1
    inline = re.split(r"\s#", lines[index], maxsplit=1)
    if len(inline) == 2:
        block.append(inline[1].strip())
    return " ".join(block)


def unsourced_facts(path: Path) -> list[str]:
    """`file:line: text` of every pinned fact in `path` whose comment names no public source."""
    lines = path.read_text().splitlines()
    problems: list[str] = []
    for index, line in enumerate(lines):
        if line.lstrip().startswith("#"):
            continue
        hex_match = HEX_LINE.match(line)
        if not hex_match and not FACT_LINE.match(line):
            continue
        comment = comment_above(lines, index)
        missing = []
        if not SOURCE.search(comment):
            missing.append("'Source:' with a github.com/, huggingface.co/ or http(s):// location")
        if hex_match:
            pinned_url = re.search(URL + re.escape(hex_match["hex"]), comment)
            if not PIN.search(comment) and not pinned_url:
                missing.append("a commit ('commit <sha>' or '@<sha>', 12+ hex) or a URL naming it")
        if missing:
            problems.append(f"{path}:{index + 1}: {line.strip()}  -- lacks {' and '.join(missing)}")
    return problems


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_pinned_fact_in_a_shipped_config_names_its_public_source(path: Path) -> None:
    """Revisions, checksums, `expected:` and `columns:` lines each cite where they were read."""
    problems = unsourced_facts(path)
    assert not problems, "unsourced pinned facts:\n" + "\n".join(problems)


def test_the_checker_reports_unsourced_and_accepts_sourced_facts(tmp_path: Path) -> None:
    """A bare revision, a source without a commit, a broken comment block and an unsourced
    `expected:` are reported; a cited revision, a URL naming the hash and an inline source pass."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    config = tmp_path / "bad.yaml"
    config.write_text(
        f"""models:
  bare:
    revision: {sha}
  no-commit:
    # Source: github.com/org/repo, file models.py.
    revision: {sha}
  gap:
    # Source: github.com/org/repo, file models.py at commit {sha}.

    revision: {sha}
  cited:
    # Source: github.com/org/repo, file models.py at
    # commit {sha}.
    revision: {sha}
  by-url:
    # Source: https://huggingface.co/org/model/tree/{sha}
    revision: '{sha}'
benchmarks:
  b:
    source:
      expected: {{images: 10}}
      columns: {{file: path}}  # Source: huggingface.co/datasets/org/data, README.md
"""
    )
    problems = unsourced_facts(config)
    assert [p.split(": ", 1)[0] for p in problems] == [
        f"{config}:3",
        f"{config}:6",
        f"{config}:10",
        f"{config}:21",
    ]
    assert f"{config}:3: revision: {sha}  -- lacks 'Source:'" in problems[0]
    assert "lacks a commit" in problems[1]
