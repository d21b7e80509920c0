"""Pin on first use: every hub download of a config gets a commit, from the config or its lock.

A hub model or dataset whose config entry has no commit is resolved, the first time a real run
plans it, to the commit its branch points at; that commit goes into the config's lock file
(`vlbench.planning.lockfile`) and into the planned config, so the jobs' parameters, and with
them the provenance of every result, carry it. Later runs read the lock and never move. In
`pins: strict` mode an entry pinned neither in the config nor in the lock stops planning.
Planning imports no model library; the hub is asked only when something is to be resolved.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vlbench.config import source_kind
from vlbench.data.sources.hub_access import (
    COMMIT_PATTERN,
    classify_failure,
    current_commit,
    unreachable_reason,
)
from vlbench.embedding.models.dispatch import hub_pins
from vlbench.errors import VlbenchError
from vlbench.planning.lockfile import Pin, read_lock, repo_key, write_lock

BRANCH = "main"
STRICT = "strict"
PINNED, LOCKED, FIRST_USE = "pinned", "locked", "will pin on first use"
RESOLVE_ATTEMPTS = 3
RESOLVE_FIRST_DELAY_S = 1.0


@dataclass(frozen=True)
class HubUse:
    """One hub download a config makes: where its commit is set, and the repository."""

    where: str  # e.g. "models.biocap.revision", "benchmarks.x.source.revision"
    repo: str
    repo_type: str
    configured: str | None  # the config's commit; None when unpinned

    @property
    def key(self) -> str:
        return repo_key(self.repo_type, self.repo)


def _configured(value: Any) -> str | None:
    return value if isinstance(value, str) and COMMIT_PATTERN.match(value) else None


def hub_uses(config: Mapping[str, Any]) -> list[HubUse]:
    """Every hub download of a validated config, models first, in config order."""
    uses = []
    for key, spec in config["models"].items():
        for field, repo, repo_type in hub_pins(spec):
            configured = _configured(spec.get(field))
            uses.append(HubUse(f"models.{key}.{field}", repo, repo_type, configured))
    for key, spec in config["benchmarks"].items():
        source = spec["source"]
        if source_kind(source) == "hub":
            configured = _configured(source.get("revision"))
            uses.append(
                HubUse(f"benchmarks.{key}.source.revision", source["repo"], "dataset", configured)
            )
    return uses


def state(use: HubUse, pins: Mapping[str, Pin]) -> str:
    """pinned (in the config), locked (in the lock file) or will pin on first use."""
    if use.configured:
        return PINNED
    return LOCKED if use.key in pins else FIRST_USE


def commit_of(use: HubUse, pins: Mapping[str, Pin]) -> str | None:
    """The commit a download is made at: the config's, else the lock's, else None."""
    if use.configured:
        return use.configured
    pin = pins.get(use.key)
    return pin.commit if pin else None


def apply_pins(config: Mapping[str, Any], pins: Mapping[str, Pin]) -> dict[str, Any]:
    """A copy of the config with each unpinned download's locked commit filled in."""
    planned = copy.deepcopy(dict(config))
    for use in hub_uses(config):
        commit = commit_of(use, pins)
        if use.configured or commit is None:
            continue
        section, key, *rest = use.where.split(".")
        entry = planned[section][key]
        for part in rest[:-1]:
            entry = entry[part]
        entry[rest[-1]] = commit
    return planned


def _permanent(exc: Exception, label: str, branch: str) -> VlbenchError | None:
    """The one-line error of a failure that retrying cannot fix, else None."""
    failure = classify_failure(exc)
    why = {
        "unreachable": failure.detail,
        "revision": f"branch {branch!r} not found",
        "gated": "gated; accept its terms on the hub and log in",
        "repository": "repository not found (or not public)",
        "file": failure.detail,
        "client": failure.detail,
    }.get(failure.kind)
    return None if why is None else VlbenchError(f"{label}: cannot pin: {why}")


def resolve_commit(
    repo: str,
    repo_type: str,
    branch: str = BRANCH,
    ask: Callable[[str, str, str], str] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """The commit `branch` points at now, retrying server errors; one-line errors otherwise."""
    ask = ask or current_commit
    label = f"{repo_type} {repo}"
    for attempt in range(1, RESOLVE_ATTEMPTS + 1):
        try:
            commit = ask(repo, repo_type, branch)
        except Exception as exc:  # every failure becomes one line
            permanent = _permanent(exc, label, branch)
            if permanent is not None:
                raise permanent from exc
            if attempt == RESOLVE_ATTEMPTS:
                text = " ".join(str(exc).split())
                raise VlbenchError(
                    f"{label}: cannot pin after {attempt} attempts ({type(exc).__name__}: {text})"
                ) from exc
            sleep(RESOLVE_FIRST_DELAY_S * 2 ** (attempt - 1))
            continue
        if not COMMIT_PATTERN.match(commit):
            raise VlbenchError(f"{label}: the hub answered {commit!r}, not a 40-hex commit")
        return commit
    raise AssertionError("unreachable")


def now_utc() -> str:
    """The current time, as written into the lock."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def resolve_missing(
    uses: Iterable[HubUse],
    pins: Mapping[str, Pin],
    update: bool = False,
    ask: Callable[[str, str, str], str] | None = None,
) -> tuple[dict[str, Pin], list[str]]:
    """Resolve every unpinned repository not in the lock yet (all unpinned ones with `update`).

    Returns the new pins and one line per repository that could not be resolved.
    """
    pins = dict(pins)
    failures, asked = [], set()
    unreachable: str | None = None  # once the hub cannot be reached, the others are not asked
    for use in uses:
        if use.configured or use.key in asked or (use.key in pins and not update):
            continue
        asked.add(use.key)
        if unreachable is not None:
            failures.append(f"{use.where}: {use.repo_type} {use.repo}: cannot pin: {unreachable}")
            continue
        try:
            commit = resolve_commit(use.repo, use.repo_type, ask=ask)
        except VlbenchError as error:
            failures.append(f"{use.where}: {error}")
            reason = unreachable_reason(error.__cause__) if error.__cause__ else None
            unreachable = reason
            continue
        pins[use.key] = Pin(commit, BRANCH, now_utc())
    return pins, failures


def unlocked(uses: Iterable[HubUse], pins: Mapping[str, Pin]) -> list[HubUse]:
    """The downloads pinned neither in the config nor in the lock."""
    return [use for use in uses if commit_of(use, pins) is None]


def stale_keys(uses: Iterable[HubUse], pins: Mapping[str, Pin]) -> list[str]:
    """Lock entries no unpinned download of the config reads (removed, or pinned in it)."""
    needed = {use.key for use in uses if not use.configured}
    return sorted(key for key in pins if key not in needed)


def strict_error(missing: list[HubUse], lock: Path) -> VlbenchError:
    """The one-line error of strict mode: every download it refuses, and how to pin them."""
    listed = "; ".join(f"{use.where} ({use.repo_type} {use.repo})" for use in missing)
    return VlbenchError(
        f"pins: strict refuses {len(missing)} unpinned hub download(s): {listed}; set their "
        f"commits in the config or run `vlbench lock` to write {lock}"
    )


def summary_lines(uses: Iterable[HubUse], pins: Mapping[str, Pin]) -> list[str]:
    """One line per hub repository: its state and commit (the first use names it)."""
    lines, seen = [], set()
    for use in uses:
        if (use.key, use.configured) in seen:
            continue
        seen.add((use.key, use.configured))
        commit = commit_of(use, pins)
        shown = commit[:12] if commit else "-"
        lines.append(f"{use.where}: {use.repo_type} {use.repo}: {state(use, pins)} ({shown})")
    return lines


def plan_pins(
    config: Mapping[str, Any],
    lock: Path,
    config_name: str,
    resolve: bool,
    ask: Callable[[str, str, str], str] | None = None,
) -> tuple[dict[str, Any], list[str], list[str]]:
    """Pin a validated config for planning: (planned config, lines on what was locked now,
    warning lines on what could not be).

    With `resolve` (a real run), unpinned repositories missing from the lock are resolved now
    and the lock is rewritten; a dry run only reads the lock. Strict mode raises instead.
    """
    uses = hub_uses(config)
    pins = read_lock(lock)
    if config.get("pins") == STRICT:
        missing = unlocked(uses, pins)
        if missing:
            raise strict_error(missing, lock)
    warnings: list[str] = []
    info: list[str] = []
    if resolve and unlocked(uses, pins):
        new_pins, warnings = resolve_missing(uses, pins, ask=ask)
        if new_pins != pins:
            write_lock(lock, new_pins, config_name)
            info += [
                f"pinned {key} to {pin.commit} (branch {pin.branch}) in {lock}"
                for key, pin in sorted(new_pins.items())
                if key not in pins
            ]
            pins = new_pins
        warnings = [f"{line}; its jobs will fail until it is pinned" for line in warnings]
    return apply_pins(config, pins), info, warnings


class FirstUsePins:
    """Pins a plan leaves to its first real use: planning only reads the lock; the downloads it
    does not hold yet are resolved and locked once, when a run that executes jobs first asks for
    a hub commit (a job parameter), and written into the planned config in place."""

    def __init__(self, config: Mapping[str, Any], lock: Path, config_name: str) -> None:
        self.config = config
        self.lock = lock
        self.config_name = config_name
        self.pending = bool(unlocked(hub_uses(config), read_lock(lock)))

    def resolve_into(
        self, planned: dict[str, Any], ask: Callable[[str, str, str], str] | None = None
    ) -> tuple[list[str], list[str]]:
        """Resolve and lock what is missing, fill the commits into `planned` (the config the
        plan uses), and return (lines on what was locked now, lines on what could not be)."""
        if not self.pending:
            return [], []
        self.pending = False
        _, info, warnings = plan_pins(self.config, self.lock, self.config_name, True, ask)
        planned.update(apply_pins(planned, read_lock(self.lock)))
        return info, warnings
