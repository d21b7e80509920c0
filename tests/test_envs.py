"""The pinned dependency sets agree with each other and never let torch move."""

from __future__ import annotations

import yaml
from workflow_helpers import REPO


def pins(lines: list[str]) -> dict[str, str]:
    """name -> version of every `name==version` line."""
    result = {}
    for line in lines:
        line = line.strip()
        if line and not line.startswith(("#", "-")) and "==" in line:
            name, version = line.split("==", 1)
            result[name.lower().replace("_", "-")] = version
    return result


def test_conda_environment_installs_the_same_pins() -> None:
    requirements = pins((REPO / "envs" / "requirements.txt").read_text().splitlines())
    environment = yaml.safe_load((REPO / "envs" / "vlbench.yaml").read_text())
    pip_section = next(
        item["pip"] for item in environment["dependencies"] if isinstance(item, dict)
    )
    assert pins(pip_section) == requirements


def test_torch_is_pinned() -> None:
    requirements = pins((REPO / "envs" / "requirements.txt").read_text().splitlines())
    assert requirements["torch"] == "2.14.1"
    assert requirements["torchvision"] == "0.29.1"
    every_line = (REPO / "envs" / "requirements.txt").read_text().splitlines()
    assert all(
        "torch" not in line or "==" in line for line in every_line if not line.startswith("#")
    )
