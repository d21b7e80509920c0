"""The real huggingface_hub client against a hub that went down: the error names the hub and
how to run offline.

A module of its own: the client's own retries wait about 23 s, so the test suite hands this
module out beside biocap's fixture run (tests/conftest.py, LONGEST_FIRST), where the wait costs
no core.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from loopback_hub import LoopbackHub

REPO = "myang333/BioVITAI2TRetrieval"
SHA = "fa7f2ac1456130e7158958e4324f981bb5308668"


OFFLINE_SCRIPT = """
import sys
from vlbench.errors import VlbenchError
from vlbench.data.sources import download

download.ATTEMPTS, download.FIRST_DELAY_S = 2, 0.01
repo, sha, cache = sys.argv[1:4]
calls = [
    lambda: download.with_retries(
        lambda: download.published_sha256(repo, sha, ["data/test.parquet"]), repo, sha
    ),
    lambda: download.fetch_snapshot(repo, sha, ["data/*"], cache_dir=cache),
]
for call in calls:
    try:
        call()
    except VlbenchError as error:
        print(error)
"""


def test_unreachable_hub_is_named_with_how_to_run_offline(tmp_path: Path) -> None:
    """For real: HF_ENDPOINT on a stopped loopback hub, no HF_HUB_OFFLINE, the real client.

    The second call is a download, which huggingface_hub itself retries for about 20 s before
    giving up (not configurable); vlbench then fails at once instead of retrying again.
    """
    down = LoopbackHub()  # a hub that was there and went down: its port refuses connections
    endpoint = down.endpoint
    down.stop()
    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf-home"))
    command = [sys.executable, "-c", OFFLINE_SCRIPT, REPO, SHA, str(tmp_path / "cache")]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2, result.stdout + result.stderr
    for line in lines:
        assert line.startswith(f"dataset {REPO}@{SHA}: the hub at {endpoint} could not be reached")
        assert "Connection refused" in line and "file not found" not in line
        assert "source: {path: /that/dir}" in line
