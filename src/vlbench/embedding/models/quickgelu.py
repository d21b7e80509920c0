"""Refuse QuickGELU weights loaded under a plain-GELU architecture name, and the reverse.

Since open_clip 2.29 the OpenAI, DFN and MetaCLIP weights must be loaded under the
`-quickgelu` model name; under the plain name open_clip only warns and scores silently drop.
open_clip's pretrained registry records `quick_gelu` per tag (tags are checked from its static
copy, `open_clip_tags.check_activation`, at plan time and in the job); the OpenAI download URLs
carry the sha256 of their files, so QuickGELU weights are also recognised as local files here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from vlbench.embedding.models.open_clip_tags import QUICKGELU_SUFFIX, activation_refusal
from vlbench.errors import VlbenchError


def _refuse(name: str, weights: str, trained_quick_gelu: bool) -> VlbenchError:
    import open_clip

    exists = name + QUICKGELU_SUFFIX in open_clip.list_models()
    return activation_refusal(name, weights, trained_quick_gelu, exists)


def _hash_in_url(url: str) -> str | None:
    """The sha256 (or its prefix) that open_clip's download URLs embed, if any."""
    filename = os.path.basename(url)
    if "openaipublic" in url:
        return url.split("/")[-2]
    if "mlfoundations" in url:
        return os.path.splitext(filename)[0].split("-")[-1]
    return None


@cache
def known_weight_hashes() -> dict[str, bool]:
    """sha256 (or prefix) of every registry download URL -> whether it is QuickGELU weights."""
    from open_clip.pretrained import get_pretrained_cfg, list_pretrained

    hashes: dict[str, bool] = {}
    for model, tag in list_pretrained():
        cfg = get_pretrained_cfg(model, tag)
        digest = _hash_in_url(cfg.get("url", ""))
        if digest:
            hashes[digest] = hashes.get(digest, False) or bool(cfg.get("quick_gelu", False))
    return hashes


def trained_with_quick_gelu(checkpoint: Path, sha256: str) -> bool | None:
    """What a local checkpoint was trained with, when that can be known; None otherwise.

    Known from an `open_clip_config.json` beside the file (hub layout), or from the file's
    sha256 matching a download in open_clip's registry.
    """
    sibling = checkpoint.parent / "open_clip_config.json"
    if sibling.is_file():
        try:
            config = json.loads(sibling.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise VlbenchError(f"{sibling}: not valid JSON ({exc})") from exc
        return bool(config.get("model_cfg", config).get("quick_gelu", False))
    for digest, quick_gelu in known_weight_hashes().items():
        if sha256.startswith(digest):
            return quick_gelu
    return None


def check_local_checkpoint(
    name: str, model_cfg: Mapping[str, Any], checkpoint: Path, sha256: str
) -> None:
    """Raise when a local checkpoint is known to use the other activation."""
    trained = trained_with_quick_gelu(checkpoint, sha256)
    if trained is not None and trained != bool(model_cfg.get("quick_gelu", False)):
        raise _refuse(name, f"checkpoint {checkpoint}", trained)
