"""Whether a failed hub request reached the hub at all: shared by dataset and model downloads."""

from __future__ import annotations

import errno
import re
import socket
from dataclasses import dataclass

# A pinned hub revision: a full commit sha (branch and tag names move).
COMMIT_PATTERN = re.compile(r"^[0-9a-f]{40}$")

# Connection failures that mean the hub was not reached at all (httpx, httpx2 and requests
# name their connect errors so; the OS errors underneath carry these errnos).
CONNECT_ERROR_NAMES = ("ConnectError", "ConnectTimeout", "ConnectionError")
CONNECT_ERROR_MODULES = ("httpx", "httpcore", "requests", "urllib3")
UNREACHABLE_ERRNOS = {errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN}


def hub_endpoint() -> str:
    """The hub URL huggingface_hub talks to (HF_ENDPOINT, read when it was imported)."""
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and the exceptions it was raised from, outermost first."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def unreachable_reason(exc: BaseException) -> str | None:
    """Why the hub could not be reached at all (offline mode, refused, DNS, no route), or None.

    Looks through the exceptions `exc` was raised from: huggingface_hub wraps a connection
    failure of a download in LocalEntryNotFoundError ("file not found in the cache").
    """
    from huggingface_hub import errors

    for item in _chain(exc):
        if isinstance(item, errors.OfflineModeIsEnabled):
            return f"HF_HUB_OFFLINE is set, but this needs the hub at {hub_endpoint()}"
        kind = type(item)
        connect_error = kind.__name__ in CONNECT_ERROR_NAMES and kind.__module__.startswith(
            CONNECT_ERROR_MODULES
        )
        if (
            connect_error
            or isinstance(item, socket.gaierror | ConnectionRefusedError)
            or (isinstance(item, OSError) and item.errno in UNREACHABLE_ERRNOS)
        ):
            return f"the hub at {hub_endpoint()} could not be reached ({_one_line(item)})"
    return None


@dataclass(frozen=True)
class HubFailure:
    """What kind of failure a hub request met, for callers to word and retry by.

    kind: `unreachable` (detail says why), `revision` (no such branch or commit), `gated`,
    `repository` (not found or not public), `file` (no such file at that revision), `client`
    (another 4xx answer: detail is the status and message) or `transient` (5xx, 429, or an
    error that did not come from an answer: worth retrying).
    """

    kind: str
    detail: str = ""


def classify_failure(exc: BaseException) -> HubFailure:
    """Sort a failed hub request into one HubFailure kind (most specific first)."""
    from huggingface_hub import errors

    reason = unreachable_reason(exc)
    if reason is not None:
        return HubFailure("unreachable", reason)
    for kind, types in (
        ("revision", errors.RevisionNotFoundError),
        ("gated", errors.GatedRepoError),  # a subclass of RepositoryNotFoundError
        ("repository", errors.RepositoryNotFoundError),
        ("transient", errors.LocalEntryNotFoundError),  # a cache miss after a failed fetch
        ("file", errors.EntryNotFoundError | errors.RemoteEntryNotFoundError),
    ):
        if isinstance(exc, types):
            return HubFailure(kind, _one_line(exc))
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status is not None and status < 500 and status != 429:
        return HubFailure("client", f"HTTP {status} ({' '.join(str(exc).split())})")
    return HubFailure("transient", _one_line(exc))


def current_commit(repo: str, repo_type: str = "model", revision: str = "main") -> str:
    """The commit sha a branch of a hub repository points to now (needs network access)."""
    from huggingface_hub import HfApi

    api = HfApi()
    info = (
        api.dataset_info(repo, revision=revision)
        if repo_type == "dataset"
        else api.model_info(repo, revision=revision)
    )
    return str(info.sha)
