"""FG-CLIP (qihoo360/fg-clip-base) without its remote code, on transformers' own CLIPModel.

FG-CLIP v1 (github.com/360CVGroup/FG-CLIP, tag v1.0: commit
0fcea590d63e612330b40204a393b451cf364877) is a CLIP ViT-B/16 whose text embeddings add two
248-position tables for long captions. Its code
(`fgclip/model/clip_strc/fgclip.py`, F; `modeling_clip.py`, M) and the repository's own remote
code import modules transformers 5 no longer has, so they cannot run here. The path its README
and every evaluation script use for captions of up to 77 tokens (`walk_short_pos=True`,
`max_length=77`: README L103-113; e.g. `fgclip/eval/coco_retrieval.py` L54-61) is CLIP's:

- text: token embedding plus the 77-row `position_embedding` (M L287-289), the causal CLIP
  encoder, the final LayerNorm, pooling at the first `<|endoftext|>` (F L54-56 forces its id,
  49407; M L825-844), then `text_projection` (F L227-228);
- image: CLIP's vision tower, CLS token, `post_layernorm`, `visual_projection` (F L128-153).

So the checkpoint loads into transformers' CLIPModel, strictly, once the weights only the long
path or training use are set aside (FG_CLIP_ONLY_KEYS, F L69-74 and M L260-261); a checkpoint
without them is not FG-CLIP's layout and is refused. Inputs as its scripts make them: captions
tokenized with the repository's tokenizer to 77 tokens, padded to the length, `input_ids` only
(`coco_retrieval.py` L54-61); images resized to 224 x 224 with PIL's bicubic filter, aspect ratio
not kept (`image.resize((224, 224))`, `coco_retrieval.py` L44-46, README L99), then the
repository's CLIPImageProcessor (resize and crop are no-ops at that size; its mean and std).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from vlbench.embedding.models.base import EmbeddingModel
from vlbench.embedding.models.checkpoints import load_strict, read_state_dict
from vlbench.embedding.models.hf_clip import (
    HfClip,
    HfTokenizer,
    open_hf_folder,
    resolve_hf_dir,
    weight_files,
)
from vlbench.embedding.models.transforms import build_image_transform, describe_open_clip
from vlbench.errors import VlbenchError

# Weights of the long-caption path and of training, not used by the short path.
FG_CLIP_ONLY_KEYS = (
    "text_model.embeddings.position_embedding_res.weight",
    "text_model.embeddings.position_embedding_ori.weight",
    "text_filip_projection.weight",
    "logit_scale_finegraind",
    "logit_scale_hardneg",
)
# Position-id buffers some saves include; CLIPModel makes its own (not in its state dict).
POSITION_ID_KEYS = ("text_model.embeddings.position_ids", "vision_model.embeddings.position_ids")
CONTEXT_LENGTH = 77  # the short path's positions (M L257; README L103-113)
IMAGE_SIZE = 224  # `image.resize((224, 224))` before the processor (coco_retrieval.py L44-46)


class InputIdsTokenizer(HfTokenizer):
    """FG-CLIP's scripts hand the model `input_ids` alone (no attention mask)."""

    def __call__(self, texts: list[str]) -> dict[str, torch.Tensor]:
        return {"input_ids": self.encode(texts)["input_ids"]}


def _short_path_state(files: list[Path], label: str) -> dict[str, torch.Tensor]:
    """The checkpoint's CLIP weights, after checking the FG-CLIP-only ones are there."""
    state = read_state_dict(files[0])
    missing = [key for key in FG_CLIP_ONLY_KEYS if key not in state]
    if missing:
        raise VlbenchError(
            f"model {label}: {files[0]} is not an FG-CLIP checkpoint (it lacks "
            f"{', '.join(missing)})"
        )
    return {
        key: value
        for key, value in state.items()
        if key not in FG_CLIP_ONLY_KEYS and key not in POSITION_ID_KEYS
    }


def _clip_model(directory: Path, state: dict[str, torch.Tensor], eos: int, label: str) -> Any:
    from transformers import CLIPConfig, CLIPModel

    config = CLIPConfig.from_pretrained(str(directory))
    config.text_config.eos_token_id = eos  # pooling at the first <|endoftext|> (F L54-56)
    model = CLIPModel(config)
    load_strict(
        model,
        state,
        f"model {label}: the checkpoint does not fit CLIP's architecture from "
        f"{directory / 'config.json'}",
    )
    return model


def load_fg_clip(spec: Mapping[str, Any], device: torch.device | None = None) -> EmbeddingModel:
    """FG-CLIP's short-caption path (module docstring), from a pinned hub snapshot or folder."""
    from transformers import AutoTokenizer, CLIPImageProcessor

    folder = open_hf_folder(spec, device)
    name, directory = folder.name, folder.directory
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
        processor = CLIPImageProcessor.from_pretrained(str(directory))
    except (OSError, ValueError, KeyError) as exc:
        raise VlbenchError(f"model {name}: cannot load ({str(exc).splitlines()[0]})") from exc
    state = _short_path_state(folder.files, name)
    model = _clip_model(directory, state, tokenizer.eos_token_id, name)
    context_length = int(spec.get("context_length", CONTEXT_LENGTH))
    if context_length != CONTEXT_LENGTH:
        raise VlbenchError(
            f"model {name}: context_length {context_length}: FG-CLIP's short-caption path takes "
            f"{CONTEXT_LENGTH} tokens (its 248-token path is not evaluated here)"
        )
    image_transform = describe_open_clip(
        {
            "size": IMAGE_SIZE,
            "resize_mode": "squash",
            "interpolation": "bicubic",
            "mean": processor.image_mean,
            "std": processor.image_std,
        }
    )
    return EmbeddingModel(
        model=HfClip(model).to(folder.device).eval(),
        preprocess=build_image_transform(image_transform),
        tokenizer=InputIdsTokenizer(tokenizer, context_length),
        device=folder.device,
        precision=folder.precision,
        image_transform=image_transform,
        context_length=context_length,
        weights=folder.files,
        source={"adapter": "fg_clip", "name": name, "path": "short captions", **folder.record},
    )


def weights_files(spec: Mapping[str, Any]) -> list[Path]:
    """The weights file of an FG-CLIP repository (downloaded if pinned on the hub)."""
    return weight_files(resolve_hf_dir(spec)[0])
