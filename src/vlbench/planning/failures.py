"""The end of a failed run: each failed job's one-line cause and its log, read back from files.

Snakemake prints a failed job's log in the middle of its output and ends the run on "At least
one job did not complete successfully"; the cause (the `ERROR:` line a rule script writes to its
log, `vlbench.rule_log`) is easy to miss among the jobs that kept running. The `onerror` hook
reads the run's own log for the jobs that failed ("Error in rule R:" ... "log: PATH") and
prints one line per job: the rule, its cause and where its log is. It also leaves a note beside
the tables (`results/tables/LAST_RUN_FAILED.md`), so that the tables of an earlier complete run
never look current after a failed one; the next complete run removes it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from vlbench.atomic import write_text
from vlbench.paths import FAILED_RUN_NOTE

_FAILED = re.compile(r"^Error in rule (\S+?):\s*$")
_LOG = re.compile(r"^\s+log: (\S+)")
_CAUSE = "ERROR: "


def _cause(job_log: Path) -> str:
    """A job log's `ERROR:` line, else its last line (a traceback's), else a pointer to it."""
    try:
        lines = [line.strip() for line in job_log.read_text(errors="replace").splitlines()]
    except OSError:
        return "its log was not written"
    causes = [line.removeprefix(_CAUSE) for line in lines if line.startswith(_CAUSE)]
    if causes:
        return causes[-1]
    written = [line for line in lines if line]
    return written[-1] if written else "its log is empty"


def failed_job_causes(run_log: str | Path | Iterable[str | Path] | None) -> list[str]:
    """One line per failed job of the run whose Snakemake log file(s) are `run_log` (what
    Snakemake hands `onerror`: a path, or a list of them)."""
    logs = [run_log] if isinstance(run_log, str | Path) else list(run_log or [])
    lines: list[str] = []
    for path in logs:
        try:
            lines += Path(path).read_text(errors="replace").splitlines()
        except OSError:
            continue
    found: list[str] = []
    rule = None
    for line in lines:
        started = _FAILED.match(line)
        if started:
            rule = started.group(1)
            continue
        logged = _LOG.match(line) if rule else None
        if logged:
            job_log = Path(logged.group(1))
            found.append(f"vlbench: {rule} failed: {_cause(job_log)} (log: {job_log})")
            rule = None
    return list(dict.fromkeys(found))


def write_failed_run_note(causes: Sequence[str], note: str | Path = FAILED_RUN_NOTE) -> bool:
    """Say beside the tables that the last run failed, and from when the tables are (nothing
    when no table was ever written); True when written."""
    tables = Path(note).parent / "metrics.csv"
    if not tables.is_file():
        return False
    written = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(tables.stat().st_mtime))
    failed = time.strftime("%Y-%m-%d %H:%M:%S")
    lines = [
        "# The last run did not complete",
        "",
        f"The run that ended at {failed} failed; the tables in this folder are from an earlier "
        f"run (metrics.csv written at {written}) and do not show what it changed.",
        "",
        *(f"- {cause}" for cause in causes),
        "",
        "The next run that completes removes this note.",
    ]
    write_text(note, "\n".join(lines) + "\n")
    return True


def remove_failed_run_note(note: str | Path = FAILED_RUN_NOTE) -> None:
    """A complete run: the tables are current again."""
    Path(note).unlink(missing_ok=True)
