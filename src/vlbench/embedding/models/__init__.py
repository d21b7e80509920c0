"""Model adapters: load any model of the paper tables as an `EmbeddingModel`.

`load_model(spec)` dispatches on the spec's `adapter`: `open_clip` (default: built-in names and
tags, `hf-hub:` repos pinned to a commit, `local-dir:` folders, local checkpoints, custom
architecture JSONs), `pmc_clip` (PMC-CLIP's official architecture and checkpoint files) and
`hf_clip` (transformers CLIP-family models open_clip cannot load).

Names are imported on first use, so planning code (which only reads specs) does not import
torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "PRECISIONS": "base",
    "BadEmbeddings": "base",
    "EmbeddingModel": "base",
    "normalise": "base",
    "pick_device": "base",
    "ADAPTERS": "dispatch",
    "hub_pins": "dispatch",
    "import_adapters_ahead": "dispatch",
    "load_model": "dispatch",
    "local_paths": "dispatch",
    "unpinned": "dispatch",
    "weights_files": "dispatch",
    "looks_like_path": "hub",
    "load_open_clip": "open_clip_adapter",
    "register_model_config": "open_clip_adapter",
    "write_random_checkpoint": "open_clip_adapter",
    "library_versions": "provenance",
    "model_provenance": "provenance",
    "build_image_transform": "transforms",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    """Import the submodule that defines `name` when it is first asked for."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
