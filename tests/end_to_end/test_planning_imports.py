"""Planning a paper config (a dry run) imports neither torch nor open_clip.

Every job on a cluster re-parses the Snakefile, so what planning imports is paid per job.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from workflow_helpers import REPO, SNAKEFILE

HEAVY = ("torch", "torchvision", "open_clip", "transformers", "faiss", "matplotlib")
IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)$", re.MULTILINE)


@pytest.mark.parametrize("config", sorted((REPO / "config").glob("*.yaml")), ids=lambda p: p.name)
def test_a_dry_run_imports_no_model_library(config: Path, tmp_path: Path) -> None:
    command = [sys.executable, "-X", "importtime", "-m", "snakemake", "-n", "--cores", "1"]
    command += ["--snakefile", str(SNAKEFILE), "--configfile", str(config)]
    # Any working directory: every path a shipped config writes is relative to its own file.
    command += ["--directory", str(tmp_path)]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    modules = set(IMPORTED.findall(result.stderr))
    assert "vlbench.planning.targets" in modules  # the Snakefile was parsed
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))
    # One preflight table; a config plans without warnings (missing data is "not run"), and
    # the demo finds its model file from here.
    output = result.stdout + result.stderr
    assert output.count("vlbench preflight of") == 1
    assert "vlbench warning" not in output, output[-2000:]
    if config.name == "config.yaml":  # planned at all: its model file was found (else refused)
        assert "not run: missing" not in output
