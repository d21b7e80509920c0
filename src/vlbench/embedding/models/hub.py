"""Hugging Face hub downloads pinned to a commit, with one-line errors."""

from __future__ import annotations

from pathlib import Path

from vlbench.data.sources.hub_access import (
    COMMIT_PATTERN,
    unreachable_reason,
)
from vlbench.errors import VlbenchError

# PMC-CLIP's default BERT text model (planning pins it without importing the adapter).
PMC_CLIP_TEXT_MODEL = "microsoft/BiomedNLP-PubMedBERT-base-uncased-abstract-fulltext"

HF_HUB_PREFIX = "hf-hub:"
LOCAL_DIR_PREFIX = "local-dir:"
REPO_TYPES = ("model", "dataset")
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npz")
MODEL_OFFLINE_HINT = (
    "to run offline, copy the repository to a local directory laid out like the hub repo and "
    "point the model entry at it with 'local-dir:/that/dir' (or give a local checkpoint path)"
)


def looks_like_path(pretrained: str) -> bool:
    """Whether a `pretrained` string names a local file rather than an open_clip tag."""
    if pretrained.startswith((HF_HUB_PREFIX, LOCAL_DIR_PREFIX)):
        return False
    return "/" in pretrained or pretrained.endswith(CHECKPOINT_SUFFIXES)


def split_schema(identifier: str) -> tuple[str | None, str]:
    """('hf-hub', 'org/repo'), ('local-dir', '/path') or (None, identifier)."""
    for schema, prefix in (("hf-hub", HF_HUB_PREFIX), ("local-dir", LOCAL_DIR_PREFIX)):
        if identifier.startswith(prefix):
            rest = identifier[len(prefix) :]
            if not rest:
                raise VlbenchError(f"{identifier!r}: nothing after '{prefix}'")
            return schema, rest
    return None, identifier


def split_hub_file(pretrained: str) -> tuple[str, str] | None:
    """('org/repo', 'path/in/repo.pt') for `hf-hub:org/repo/path/in/repo.pt` (a weights file
    inside a hub repository, as open_clip's `hf_hub` tags name theirs); None for anything else."""
    if not pretrained.startswith(HF_HUB_PREFIX):
        return None
    parts = pretrained[len(HF_HUB_PREFIX) :].split("/", 2)
    if len(parts) < 3 or not all(parts):
        raise VlbenchError(
            f"pretrained {pretrained!r}: name a file inside a hub repository as "
            "'hf-hub:org/repo/file.pt' (a whole repository is a model 'name' instead)"
        )
    return f"{parts[0]}/{parts[1]}", parts[2]


def require_revision(label: str, repo: str, revision: str | None, key: str = "revision") -> str:
    """The pinned commit of a hub repository, or a one-line error saying how to pin it."""
    if not revision:
        raise VlbenchError(
            f"model {label}: hub repository {repo} is not pinned and not locked; run "
            f"`vlbench lock CONFIG` where the hub can be reached, or set '{key}' to a 40-hex "
            "commit sha"
        )
    if not COMMIT_PATTERN.match(revision):
        raise VlbenchError(
            f"model {label}: '{key}' must be a 40-hex commit sha, not {revision!r} "
            "(branch and tag names move)"
        )
    return revision


def _download_error(exc: BaseException, what: str, failed: str) -> VlbenchError:
    """The one-line error of a failed download; an unreachable hub says how to run offline."""
    reason = unreachable_reason(exc)
    if reason is not None:
        return VlbenchError(f"{what}: {failed}: {reason}; {MODEL_OFFLINE_HINT}")
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return VlbenchError(f"{what}: {failed} ({first_line})")


def snapshot(
    repo: str,
    revision: str,
    allow_patterns: list[str] | None = None,
    repo_type: str = "model",
) -> Path:
    """Download (or reuse from the cache) the files of a repository at a commit; return the dir."""
    from huggingface_hub import snapshot_download

    try:
        return Path(
            snapshot_download(
                repo_id=repo,
                revision=revision,
                repo_type=repo_type,
                allow_patterns=allow_patterns,
            )
        )
    except Exception as exc:  # network, auth, missing revision: all reported in one line
        raise _download_error(exc, f"hub {repo_type} {repo}@{revision}", "download failed") from exc


def hub_file(repo: str, filename: str, revision: str, repo_type: str = "model") -> Path:
    """Download (or reuse from the cache) one file of a repository at a commit."""
    from huggingface_hub import hf_hub_download

    try:
        return Path(
            hf_hub_download(repo_id=repo, filename=filename, revision=revision, repo_type=repo_type)
        )
    except Exception as exc:
        raise _download_error(
            exc, f"hub {repo_type} {repo}@{revision}", f"cannot download {filename}"
        ) from exc
