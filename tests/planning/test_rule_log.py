"""A rule script's log: what the body writes lands there, and a finished body freezes the heap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import gc, sys
from vlbench.errors import VlbenchError
from vlbench.rule_log import rule_log
try:
    with rule_log(sys.argv[1]) as log:
        log.info("written")
        if sys.argv[2] == "fail":
            raise VlbenchError("bad row 3")
finally:
    print(gc.get_freeze_count() > 0)
"""


def run(log: Path, outcome: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", SCRIPT, str(log), outcome]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_a_finished_body_freezes_the_heap_for_a_quick_exit(tmp_path: Path) -> None:
    done = run(tmp_path / "ok.log", "ok")
    assert (done.returncode, done.stdout) == (0, "True\n")
    assert (tmp_path / "ok.log").read_text().splitlines()[-1].endswith("INFO written")


def test_a_failed_body_is_one_line_and_freezes_nothing(tmp_path: Path) -> None:
    failed = run(tmp_path / "bad.log", "fail")
    assert (failed.returncode, failed.stdout) == (1, "False\n")
    assert failed.stderr == "vlbench error: bad row 3\n"
    assert (tmp_path / "bad.log").read_text().splitlines()[-1] == "ERROR: bad row 3"


LOGGER_STATE = """
import logging, sys
from vlbench.rule_log import rule_log
logger = logging.getLogger("vlbench")
before = (logger.level, logger.propagate, list(logger.handlers))
with rule_log(sys.argv[1]) as log:
    inside = (log.level, log.propagate)
print(inside == (logging.INFO, False), (logger.level, logger.propagate, logger.handlers) == before)
"""


def test_the_rule_log_leaves_the_vlbench_logger_as_it_found_it(tmp_path: Path) -> None:
    """A rule script's process ends with its log, but a library caller (or a test) goes on:
    the logger's level and propagation come back, so later log captures see its records."""
    result = subprocess.run(
        [sys.executable, "-c", LOGGER_STATE, str(tmp_path / "job.log")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.split() == ["True", "True"]
