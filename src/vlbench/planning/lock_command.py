"""`vlbench lock CONFIG`: resolve every unpinned hub download of a config up front."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from vlbench.errors import VlbenchError
from vlbench.planning.checks import check_model_keys
from vlbench.planning.lockfile import lock_path, read_lock, write_lock
from vlbench.planning.pinning import (
    hub_uses,
    resolve_missing,
    stale_keys,
    summary_lines,
    unlocked,
)
from vlbench.planning.run_config import load_run_config


def lock_config(
    config_path: str | Path,
    update: bool = False,
    check: bool = False,
    ask: Callable[[str, str, str], str] | None = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """Write the config's lock file; print one line per hub repository; 1 if any failed.

    Entries that no unpinned download of the config reads any more (a model or benchmark
    removed, or pinned in the config) are dropped. `update` moves locked entries to their
    branch's current commit; `check` asks no hub, writes nothing and fails when anything is
    pinned neither in the config nor in the lock, or the lock holds such stale entries (for CI).
    """
    config_path = Path(config_path)
    config = load_run_config([config_path])
    check_model_keys(config)
    lock = lock_path(config_path)
    uses, pins = hub_uses(config), read_lock(lock)
    failures: list[str] = []
    stale = stale_keys(uses, pins)
    unchanged = False
    if check:
        failures = [
            f"{use.where}: {use.repo_type} {use.repo} is pinned neither in the config nor in {lock}"
            for use in unlocked(uses, pins)
        ]
        failures += [
            f"{lock}: {key} is read by no unpinned download (`vlbench lock` drops it)"
            for key in stale
        ]
    else:
        new_pins, failures = resolve_missing(uses, pins, update=update, ask=ask)
        for key in stale:
            del new_pins[key]
            print(f"dropped {key} (no unpinned download of {config_path.name} reads it)", file=out)
        if new_pins != pins:
            write_lock(lock, new_pins, config_path.name)
            print(f"wrote {lock}", file=out)
        pins, unchanged = new_pins, new_pins == pins and not failures
    for line in summary_lines(uses, pins):
        print(line, file=out)
    if unchanged:
        print(f"nothing to lock: {_nothing_new(config_path.name, bool(uses), lock)}", file=out)
    for line in failures:
        print(f"vlbench error: {line}", file=err)
    return 1 if failures else 0


def _nothing_new(config_name: str, downloads: bool, lock: Path) -> str:
    """Why `vlbench lock` wrote nothing."""
    if not downloads:
        return f"{config_name} downloads nothing from the hub"
    where = f"in {config_name} or in {lock}" if lock.is_file() else f"in {config_name}"
    return f"every hub download is already pinned {where}"


def run_lock(config: str, update: bool, check: bool) -> int:
    """CLI entry: one-line errors for a bad config or lock file."""
    try:
        return lock_config(config, update=update, check=check)
    except VlbenchError as error:
        print(f"vlbench error: {error}", file=sys.stderr)
        return 1
