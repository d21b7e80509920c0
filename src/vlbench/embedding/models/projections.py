"""BioCAP-style checkpoints with two image projections: pick one for the stock open_clip model.

BioCAP's training fork (github.com/Imageomics/biocap, `train_and_eval/open_clip/transformer.py`)
gives the vision tower a taxonomic projection `visual.proj` and a caption projection
`visual.caption_proj` (plus `logit_scale_caption`); its evaluation scores zero-shot
classification and retrieval with the taxonomic one. Stock open_clip has one projection, so a
two-projection checkpoint is loaded with the chosen matrix as `visual.proj`.
"""

from __future__ import annotations

from collections.abc import Collection

import torch

from vlbench.errors import VlbenchError

IMAGE_PROJECTIONS = ("taxonomic", "caption")
DEFAULT_IMAGE_PROJECTION = "taxonomic"
PROJECTION_KEY = "visual.proj"
CAPTION_PROJECTION_KEY = "visual.caption_proj"
CAPTION_ONLY_KEYS = (CAPTION_PROJECTION_KEY, "logit_scale_caption", "logit_bias_caption")


def has_two_projections(keys: Collection[str]) -> bool:
    """Whether a checkpoint's tensor names include BioCAP's caption projection."""
    return CAPTION_PROJECTION_KEY in keys


def check_choice(label: str, choice: str) -> str:
    """Validate an `image_projection` value."""
    if choice not in IMAGE_PROJECTIONS:
        raise VlbenchError(
            f"model {label}: image_projection must be one of {', '.join(IMAGE_PROJECTIONS)}, "
            f"not {choice!r}"
        )
    return choice


def select_image_projection(
    state: dict[str, torch.Tensor], choice: str, label: str
) -> dict[str, torch.Tensor]:
    """A state dict with one image projection: `choice`'s matrix stored as `visual.proj`."""
    check_choice(label, choice)
    selected = {key: value for key, value in state.items() if key not in CAPTION_ONLY_KEYS}
    if CAPTION_PROJECTION_KEY not in state:
        if choice == "caption":
            raise VlbenchError(
                f"model {label}: image_projection 'caption' asked for, but the checkpoint has "
                f"only one image projection (no '{CAPTION_PROJECTION_KEY}')"
            )
        return selected
    if choice == "caption":
        selected[PROJECTION_KEY] = state[CAPTION_PROJECTION_KEY]
    return selected
