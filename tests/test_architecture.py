"""The house plan holds: stage subpackages import only earlier stages, the top level stays small,
protocol names live in the registry, and the package never reaches into the repository."""

from __future__ import annotations

import ast
from pathlib import Path

from workflow_helpers import REPO

from vlbench.protocols import PROTOCOLS

PACKAGE = REPO / "src" / "vlbench"
# Stage subpackages in DAG order; the parse-time helpers come last (they may ask every stage).
STAGES = ("data", "embedding", "rank", "metrics", "report", "planning")


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name.split(".")[0] == "vlbench"}


def stage_of(parts: tuple[str, ...]) -> int:
    """-1 for top-level modules, else the stage's position."""
    return STAGES.index(parts[0]) if len(parts) > 1 and parts[0] in STAGES else -1


def test_no_module_imports_a_later_stage() -> None:
    upward = []
    for path in modules():
        here = path.relative_to(PACKAGE).parts
        if here == ("cli.py",):  # the command line sits on top of every stage
            continue
        for name in imported(path):
            target = tuple(name.split(".")[1:])
            if target and stage_of(target) > stage_of(here):
                upward.append(f"{'/'.join(here)} -> {name}")
    assert upward == []


def module_name(path: Path) -> str:
    parts = ("vlbench", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_cycle_between_modules() -> None:
    """Imports between the package's modules (type-checking ones too) form no cycle."""
    names = {module_name(path): path for path in modules()}
    graph = {
        name: {target for target in imported(path) if target in names and target != name}
        for name, path in names.items()
    }
    done: set[str] = set()
    cycles = []

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            cycles.append(" -> ".join([*trail[trail.index(name) :], name]))
            return
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, [*trail, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert cycles == []


def test_the_top_level_holds_at_most_ten_modules() -> None:
    top = [path.name for path in PACKAGE.glob("*.py") if path.name != "__init__.py"]
    assert len(top) <= 10, top
    assert {
        path.name for path in PACKAGE.iterdir() if path.is_dir() and path.name != "__pycache__"
    } >= set(STAGES)


def test_protocol_names_are_string_literals_only_in_the_registry() -> None:
    found = []
    for path in modules():
        if path == PACKAGE / "protocols.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in PROTOCOLS:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value!r}")
    assert found == []


def test_the_package_never_reaches_into_the_repository() -> None:
    for path in modules():
        assert "parents[" not in path.read_text(encoding="utf-8"), path
