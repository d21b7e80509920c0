"""Fetch pinned files of a hub dataset: retry with backoff, resume, verify sha256; fail fast."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from vlbench.errors import VlbenchError
from vlbench.hashing import file_sha256

T = TypeVar("T")
LOG = logging.getLogger("vlbench")
PINNED = re.compile(r"^[0-9a-f]{40}$")
UNPINNED = "UNPINNED"
ATTEMPTS = 5
FIRST_DELAY_S = 2.0
PATHS_PER_REQUEST = 500


def require_pinned(repo: str, revision: str, where: str) -> None:
    """Refuse a placeholder or branch name: every download is pinned to a commit sha."""
    if not PINNED.match(revision or ""):
        raise VlbenchError(
            f"{where}: dataset {repo} is not pinned (revision {revision!r}); put the 40-hex "
            f"commit sha from https://huggingface.co/datasets/{repo}/commits/main there"
        )


def _permanent_error(exc: BaseException, repo: str, revision: str) -> VlbenchError | None:
    """The one-line error for failures that retrying cannot fix, else None."""
    from huggingface_hub import errors

    if isinstance(exc, errors.RevisionNotFoundError):
        return VlbenchError(f"dataset {repo}: revision {revision} does not exist")
    if isinstance(exc, errors.GatedRepoError):
        return VlbenchError(f"dataset {repo} is gated: accept its terms on the hub and log in")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return VlbenchError(f"dataset {repo}: repository not found (or not public)")
    if isinstance(exc, errors.EntryNotFoundError | errors.RemoteEntryNotFoundError):
        return VlbenchError(f"dataset {repo}@{revision}: file not found ({exc})")
    if isinstance(exc, errors.LocalEntryNotFoundError):
        return None
    status = getattr(getattr(exc, "response", None), "status_code", None)
    transient = status is None or status >= 500 or status == 429
    if isinstance(exc, errors.HfHubHTTPError) and not transient:
        return VlbenchError(f"dataset {repo}@{revision}: HTTP {status} ({exc})")
    return None


def with_retries(
    call: Callable[[], T],
    repo: str,
    revision: str,
    attempts: int = ATTEMPTS,
    first_delay_s: float = FIRST_DELAY_S,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run `call`, retrying transient failures with exponential backoff.

    Permanent failures (missing revision, repository or file; gated repo) raise a one-line
    VlbenchError at once. Partial downloads resume: huggingface_hub keeps `.incomplete` files.
    """
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
