"""Model adapters: load any model of the paper tables as an `EmbeddingModel`.

`load_model(spec)` dispatches on the spec's `adapter`: `open_clip` (default: built-in names and
tags, `hf-hub:` repos pinned to a commit, `local-dir:` folders, local checkpoints, custom
architecture JSONs), `pmc_clip` (PMC-CLIP's official architecture and checkpoint files) and
`hf_clip` (transformers CLIP-family models open_clip cannot load).
"""

from vlbench.models.base import PRECISIONS, EmbeddingModel, normalise, pick_device
from vlbench.models.dispatch import (
    ADAPTERS,
    hub_pins,
    load_model,
    local_paths,
    unpinned,
    weights_files,
)
from vlbench.models.open_clip_adapter import (
    load_open_clip,
    looks_like_path,
    register_model_config,
    write_random_checkpoint,
)
from vlbench.models.provenance import library_versions, model_provenance
from vlbench.models.transforms import build_image_transform

__all__ = [
    "ADAPTERS",
    "PRECISIONS",
    "EmbeddingModel",
    "build_image_transform",
    "hub_pins",
    "library_versions",
    "load_model",
    "load_open_clip",
    "local_paths",
    "looks_like_path",
    "model_provenance",
    "normalise",
    "pick_device",
    "register_model_config",
    "unpinned",
    "weights_files",
    "write_random_checkpoint",
]
