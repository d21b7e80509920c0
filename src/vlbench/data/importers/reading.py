"""Reading the files publishers ship, with one-line errors naming the file, line and cause."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

from vlbench.errors import VlbenchError

# How many offending items an error names before it says "and N more".
NAMED = 3


def require_folder(path: Path, what: str) -> Path:
    """`path` if it is a folder, else a one-line error naming what it should hold."""
    if not path.is_dir():
        raise VlbenchError(f"{path}: folder not found (expected {what})")
    return path


def require_file(path: Path, what: str) -> Path:
    """`path` if it is a file, else a one-line error naming the layout it belongs to."""
    if not path.is_file():
        raise VlbenchError(f"{path}: file not found ({what})")
    return path


def read_text(path: Path) -> str:
    """A UTF-8 text file (a byte-order mark is dropped)."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise VlbenchError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def read_csv(path: Path, required: Sequence[str]) -> list[dict[str, str]]:
    """The rows of a CSV file that has at least the `required` columns."""
    text = read_text(path)
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = list(reader.fieldnames or [])
        missing = [name for name in required if name not in header]
        if missing:
            raise VlbenchError(
                f"{path}: missing column(s) {', '.join(missing)} (has: {', '.join(header)})"
            )
        rows = list(reader)
    except csv.Error as exc:
        raise VlbenchError(f"{path}: not a readable CSV file ({exc})") from exc
    for number, row in enumerate(rows, start=2):
        if None in row or any(row[name] is None for name in required):
            raise VlbenchError(f"{path}: line {number}: {len(header)} columns expected")
    return rows


def read_pairs(path: Path, value_has_spaces: bool = False) -> list[tuple[str, str, int]]:
    """(key, value, line number) of a "<key> <value>" file (NABirds' .txt files).

    A value may hold spaces only where `value_has_spaces` (class names); blank lines are skipped.
    """
    pairs = []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.strip().split(" ", 1) if value_has_spaces else line.split()
        if len(parts) != 2 or not parts[1].strip():
            shape = "<id> <name>" if value_has_spaces else "<id> <value>"
            raise VlbenchError(f"{path}: line {number}: expected '{shape}', got {line!r}")
        pairs.append((parts[0], parts[1].strip() if value_has_spaces else parts[1], number))
    return pairs


def unique_mapping(path: Path, pairs: list[tuple[str, str, int]]) -> dict[str, str]:
    """key -> value, failing on a key given twice."""
    mapping: dict[str, str] = {}
    for key, value, number in pairs:
        if key in mapping:
            raise VlbenchError(f"{path}: line {number}: id {key} is listed twice")
        mapping[key] = value
    return mapping


def several(items: Sequence[str], total: int | None = None) -> str:
    """The first few items of a list, and how many more there are."""
    shown = ", ".join(items[:NAMED])
    rest = (total if total is not None else len(items)) - min(len(items), NAMED)
    return f"{shown} and {rest} more" if rest > 0 else shown


def safe_relative(value: str, path: Path, number: int) -> str:
    """A relative file path from a publisher file, refused when it could leave the folder."""
    parts = value.replace("\\", "/").split("/")
    if not value or value.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise VlbenchError(f"{path}: line {number}: {value!r} is not a plain relative file path")
    return value
