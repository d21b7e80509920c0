"""Fetch pinned files of a hub dataset: retry with backoff, resume, verify sha256; fail fast."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from vlbench.data.sources.hub_access import COMMIT_PATTERN, classify_failure, unreachable_reason
from vlbench.errors import VlbenchError
from vlbench.hashing import file_sha256

T = TypeVar("T")
LOG = logging.getLogger("vlbench")
PINNED = COMMIT_PATTERN
UNPINNED = "UNPINNED"
# Read at call time: tests (and impatient users) may lower them.
ATTEMPTS = 5
FIRST_DELAY_S = 2.0
DATASET_OFFLINE_HINT = (
    "to run offline, copy the dataset repository to a local directory laid out like the hub "
    "repo and give the benchmark 'source: {path: /that/dir}' instead of repo + revision"
)
PATHS_PER_REQUEST = 500


def require_pinned(repo: str, revision: str, where: str) -> None:
    """Refuse a placeholder or branch name: every download is pinned to a commit sha."""
    if not PINNED.match(revision or ""):
        raise VlbenchError(
            f"{where}: dataset {repo} is not pinned (revision {revision!r}) and not locked; "
            "run `vlbench lock CONFIG` where the hub can be reached, or put the 40-hex commit "
            f"sha from https://huggingface.co/datasets/{repo}/commits/main there"
        )


def offline_error(repo: str, revision: str, reason: str) -> VlbenchError:
    """The one-line error for a hub that could not be reached, with how to run offline."""
    return VlbenchError(f"dataset {repo}@{revision}: {reason}; {DATASET_OFFLINE_HINT}")


def _permanent_error(exc: BaseException, repo: str, revision: str) -> VlbenchError | None:
    """The one-line error for failures that retrying cannot fix, else None."""
    from huggingface_hub import errors

    failure = classify_failure(exc)
    if failure.kind == "unreachable":
        # huggingface_hub has already retried a download (LocalEntryNotFoundError) for ~20 s,
        # and offline mode never recovers: only a bare connection error is worth retrying here.
        retried = isinstance(exc, errors.OfflineModeIsEnabled | errors.LocalEntryNotFoundError)
        return offline_error(repo, revision, failure.detail) if retried else None
    why = {
        "revision": f"dataset {repo}: revision {revision} does not exist",
        "gated": f"dataset {repo} is gated: accept its terms on the hub and log in",
        "repository": f"dataset {repo}: repository not found (or not public)",
        "file": f"dataset {repo}@{revision}: file not found ({failure.detail})",
        "client": f"dataset {repo}@{revision}: {failure.detail}",
    }.get(failure.kind)
    return None if why is None else VlbenchError(why)


def with_retries(
    call: Callable[[], T],
    repo: str,
    revision: str,
    attempts: int | None = None,
    first_delay_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run `call`, retrying transient failures with exponential backoff.

    `attempts` and `first_delay_s` default to the module's ATTEMPTS and FIRST_DELAY_S.
    Permanent failures (missing revision, repository or file; gated repo; offline mode; a
    download that huggingface_hub already retried without reaching the hub) raise a one-line
    VlbenchError at once. Partial downloads resume: huggingface_hub keeps `.incomplete` files.
    """
    attempts = ATTEMPTS if attempts is None else attempts
    first_delay_s = FIRST_DELAY_S if first_delay_s is None else first_delay_s
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except VlbenchError:
            raise
        except Exception as exc:
            permanent = _permanent_error(exc, repo, revision)
            if permanent is not None:
                raise permanent from exc
            if attempt == attempts:
                reason = unreachable_reason(exc)
                if reason is not None:
                    raise offline_error(repo, revision, reason) from exc
                raise VlbenchError(
                    f"dataset {repo}@{revision}: download failed after {attempts} attempts "
                    f"({type(exc).__name__}: {exc})"
                ) from exc
            delay = first_delay_s * 2 ** (attempt - 1)
            LOG.warning("download attempt %d failed (%s); retrying in %.0f s", attempt, exc, delay)
            sleep(delay)
    raise AssertionError("unreachable")


def verify_files(root: Path, expected_sha256: dict[str, str]) -> int:
    """Compare downloaded files with their published sha256; return how many were checked."""
    for relative, expected in expected_sha256.items():
        path = root / relative
        if not path.is_file():
            raise VlbenchError(f"{path}: expected file missing from the download")
        actual = file_sha256(path)
        if actual != expected:
            raise VlbenchError(
                f"{path}: sha256 {actual} does not match the published {expected} "
                "(corrupt download: delete it from the cache and rerun)"
            )
    return len(expected_sha256)


def published_sha256(repo: str, revision: str, paths: list[str]) -> dict[str, str]:
    """sha256 of the LFS files among `paths`, as the hub publishes them for this revision."""
    from huggingface_hub import HfApi

    api = HfApi()
    published = {}
    for start in range(0, len(paths), PATHS_PER_REQUEST):
        chunk = paths[start : start + PATHS_PER_REQUEST]
        for info in api.get_paths_info(repo, chunk, repo_type="dataset", revision=revision):
            lfs = getattr(info, "lfs", None)
            if lfs is not None and getattr(lfs, "sha256", None):
                published[info.path] = lfs.sha256
    return published


def fetch_snapshot(
    repo: str,
    revision: str,
    patterns: Callable[[Path], list[str]] | list[str],
    cache_dir: str | Path | None = None,
    verify: bool = True,
    where: str = "source",
    sleep: Callable[[float], None] = time.sleep,
) -> Path:
    """Download the files matching `patterns` at `revision`; return the snapshot folder.

    `patterns` may be a function of the folder holding README.md (fetched first), so that the
    card's `configs` decide which data files to fetch.
    """
    from huggingface_hub import hf_hub_download, snapshot_download

    require_pinned(repo, revision, where)
    common: dict[str, Any] = {"repo_type": "dataset", "revision": revision, "cache_dir": cache_dir}
    if callable(patterns):
        readme = with_retries(
            lambda: hf_hub_download(repo, "README.md", **common), repo, revision, sleep=sleep
        )
        wanted = patterns(Path(readme).parent)
    else:
        wanted = list(patterns)
    folder = Path(
        with_retries(
            lambda: snapshot_download(repo, allow_patterns=["README.md", *wanted], **common),
            repo,
            revision,
            sleep=sleep,
        )
    )
    if verify:
        files = [
            str(path.relative_to(folder))
            for path in sorted(folder.rglob("*"))
            if path.is_file() and path.name != "README.md"
        ]
        if files:
            expected = with_retries(
                lambda: published_sha256(repo, revision, files), repo, revision, sleep=sleep
            )
            checked = verify_files(folder, expected)
            LOG.info("verified sha256 of %d file(s) of %s@%s", checked, repo, revision)
    return folder
