"""Run Snakemake's command line several times, each in a child forked from one process that has
imported Snakemake and the workflow's planning modules once.

A dry run of the test workflows is about 1.1 CPU-s, 0.8 of it imports; a forked child pays the
parse and the DAG only. Each child is a whole process of its own (its own working directory,
file descriptors, module state and exit), so it plans exactly as `python -m snakemake` does.

Usage: python forked_snakemake.py REPO < runs.json, where runs.json lists objects with `argv`
(Snakemake's arguments), `cwd`, `stdout` and `stderr` (file paths); prints the exit codes as a
JSON list.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import json
import os
import re
import sys
import traceback
from pathlib import Path

# The vlbench modules the Snakefile and the rule files import.
RULE_IMPORT = re.compile(r"^from (vlbench[\w.]*) import", re.MULTILINE)


def preload(repo: Path) -> None:
    """Import Snakemake's command line and every vlbench module the rule files import."""
    importlib.import_module("snakemake.cli")
    for path in [repo / "Snakefile", *sorted((repo / "workflow" / "rules").glob("*.smk"))]:
        for module in RULE_IMPORT.findall(path.read_text(encoding="utf-8")):
            importlib.import_module(module)


def child(run: dict) -> int:
    """Snakemake's `main` on `run`'s arguments, in its folder, its output to its files."""
    os.chdir(run["cwd"])
    for fd, name in ((1, run["stdout"]), (2, run["stderr"])):
        handle = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(handle, fd)
        os.close(handle)
    main = importlib.import_module("snakemake.cli").main
    sys.argv = [importlib.util.find_spec("snakemake.__main__").origin, *run["argv"]]
    try:
        main()
    except SystemExit as stop:
        code = stop.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def run_forked(run: dict) -> int:
    """Fork, run `run` in the child and return its exit status."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            code = child(run)
        except BaseException:
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()  # what an interpreter's exit runs, then no second exit
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    preload(Path(sys.argv[1]))
    print(json.dumps([run_forked(run) for run in json.load(sys.stdin)]))
