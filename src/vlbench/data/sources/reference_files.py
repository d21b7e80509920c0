"""A reference evaluation's own annotation file, fetched from its repository at a pinned commit.

Where a paper's evaluation code reads its own annotation CSV (BioCAP and BioCLIP 2 read Rare
Species and the IDLE-OO subsets from CSVs in their repositories), that file defines the images,
their order (few-shot folds depend on it) and their class texts. A benchmark source names it as
`reference: {repo, commit, path, sha256}`; it is downloaded once from GitHub's raw file server
(`https://raw.githubusercontent.com/<repo>/<commit>/<path>`; `$VLBENCH_GITHUB_RAW_ENDPOINT`
points elsewhere, e.g. a mirror or the tests' loopback server), checked against its sha256, and
kept under its digest in `$VLBENCH_REFERENCE_CACHE` (default `$XDG_CACHE_HOME/vlbench/reference`).
A cached copy is checked against the digest again every time it is used.
"""

from __future__ import annotations

import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from vlbench.atomic import atomic_path
from vlbench.data.sources import download
from vlbench.errors import VlbenchError
from vlbench.hashing import file_sha256

LOG = logging.getLogger("vlbench")
ENDPOINT_ENV = "VLBENCH_GITHUB_RAW_ENDPOINT"
DEFAULT_ENDPOINT = "https://raw.githubusercontent.com"
CACHE_ENV = "VLBENCH_REFERENCE_CACHE"
TIMEOUT_S = 60.0
# Answers that retrying can fix (the rest, 404 above all, are final).
TRANSIENT_STATUSES = {408, 425, 429, 500, 502, 503, 504}


def reference_url(reference: Mapping[str, Any]) -> str:
    """Where a reference file is read: the raw file server, at the pinned commit."""
    endpoint = os.environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT
    path = PurePosixPath(reference["path"]).as_posix()
    return f"{endpoint.rstrip('/')}/{reference['repo']}/{reference['commit']}/{path}"


def cache_dir() -> Path:
    """The folder verified reference files are kept in, by digest."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vlbench" / "reference"


def _download(url: str, target: Path, where: str, sleep: Callable[[float], None]) -> None:
    """Write the body at `url` to `target` atomically, retrying transient failures."""
    attempts = download.ATTEMPTS
    for attempt in range(1, attempts + 1):
        try:
            with (
                urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer,
                atomic_path(target) as tmp,
            ):
                tmp.write_bytes(answer.read())
            return
        except urllib.error.HTTPError as error:
            if error.code not in TRANSIENT_STATUSES:
                raise VlbenchError(
                    f"{where}: {url} answered {error.code} {error.reason} (is the repository, "
                    "commit or path wrong?)"
                ) from None
            failure = f"HTTP {error.code}"
        except (urllib.error.URLError, OSError, TimeoutError) as error:
            failure = f"{type(error).__name__}: {getattr(error, 'reason', error)}"
        if attempt == attempts:
            raise VlbenchError(
                f"{where}: {url} could not be fetched after {attempts} attempts ({failure}); "
                f"offline, put a copy of the file at {target} or point ${ENDPOINT_ENV} at a mirror"
            )
        delay = download.FIRST_DELAY_S * 2 ** (attempt - 1)
        LOG.warning("fetching %s failed (%s); retrying in %.0f s", url, failure, delay)
        sleep(delay)


def fetch_reference(
    reference: Mapping[str, Any], where: str, sleep: Callable[[float], None] = time.sleep
) -> Path:
    """The local, sha256-verified copy of a reference annotation file (downloaded if needed)."""
    expected = reference["sha256"]
    cached = cache_dir() / expected / PurePosixPath(reference["path"]).name
    if cached.is_file():
        if file_sha256(cached) == expected:
            return cached
        LOG.warning("%s: cached %s does not match its sha256; fetching it again", where, cached)
    url = reference_url(reference)
    cached.parent.mkdir(parents=True, exist_ok=True)
    _download(url, cached, where, sleep)
    actual = file_sha256(cached)
    if actual != expected:
        cached.unlink()
        raise VlbenchError(
            f"{where}.sha256: {url} has sha256 {actual}, not the pinned {expected} (a different "
            "file at that commit and path, or a corrupt download)"
        )
    LOG.info("fetched %s (sha256 verified)", url)
    return cached
