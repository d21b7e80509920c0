"""The key tables of `config/README.md`, written from the config schema: one source per key.

Each documented key's schema entry holds what it means (`description`), its default (`default`;
`x-default` where the schema's own default is not what a reader needs, such as "the model's")
and what changing it reruns (`x-reruns`). `python -m vlbench.planning.config_reference
config/README.md` rewrites every table between `<!-- keys:SECTION -->` and
`<!-- end keys:SECTION -->`; the rest of the README is written by hand, and a test checks that
the tables are current.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vlbench.config import load_schema
from vlbench.errors import VlbenchError

HEADER = "| key | default | meaning | changing it reruns |\n| --- | --- | --- | --- |"
TABLE = re.compile(r"(<!-- keys:(\w+) -->\n)(.*?)(<!-- end keys:\2 -->)", re.DOTALL)


def section_keys(schema: Mapping[str, Any], section: str) -> tuple[dict[str, Any], list[str]]:
    """The properties a section's table lists and the required ones: `top` (the top-level
    keys), `models` and `benchmarks` (one entry's keys), or a settings section."""
    if section == "top":
        return dict(schema["properties"]), list(schema.get("required", ()))
    if section in ("models", "benchmarks"):
        entry = schema["$defs"][section.removesuffix("s")]
        return dict(entry["properties"]), list(entry.get("required", ()))
    return dict(schema["properties"][section]["properties"]), []


def default_cell(entry: Mapping[str, Any], required: bool) -> str:
    """How a key's default reads in its table."""
    if "x-default" in entry:
        return str(entry["x-default"])
    if required:
        return "required"
    if "default" not in entry:
        return "absent"
    value = entry["default"]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value == "":
        return '`""`'
    return f"`{value if isinstance(value, str) else json.dumps(value)}`"


def key_row(key: str, entry: Mapping[str, Any], required: bool, where: str) -> str:
    """One table row; a key without a description or an `x-reruns` is refused by name."""
    missing = [name for name in ("description", "x-reruns") if not entry.get(name)]
    if missing:
        raise VlbenchError(f"config schema: {where}.{key} has no {' or '.join(missing)}")
    cells = [f"`{key}`", default_cell(entry, required), entry["description"], entry["x-reruns"]]
    return (
        "| " + " | ".join(" ".join(str(cell).split()).replace("|", "\\|") for cell in cells) + " |"
    )


def key_table(schema: Mapping[str, Any], section: str) -> str:
    """A section's key table, in the schema's order of keys."""
    properties, required = section_keys(schema, section)
    rows = [key_row(key, entry, key in required, section) for key, entry in properties.items()]
    return "\n".join([HEADER, *rows]) + "\n"


def render(readme: str, schema: Mapping[str, Any] | None = None) -> str:
    """The README with every key table written from the schema."""
    schema = schema or load_schema()
    return TABLE.sub(
        lambda match: match.group(1) + key_table(schema, match.group(2)) + match.group(4), readme
    )


def main(argv: list[str]) -> int:
    """Rewrite the key tables of the README files named on the command line."""
    for name in argv:
        path = Path(name)
        path.write_text(render(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
