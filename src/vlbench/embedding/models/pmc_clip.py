"""PMC-CLIP (Lin et al., MICCAI 2023) with its official architecture and text feature.

Official code: github.com/WeixiongLin/PMC-CLIP (`src/pmc_clip/model/pmc_clip.py`, config
`RN50_fusion4.json`). Image tower: ModifiedResNet-50 (layers 3-4-6-3, width 64, 224 px,
output 768) whose attention pool has width * 32 / 64 heads (32), not the 8 that some
third-party loaders use. Text tower: PubMedBERT; the text feature is the last hidden state at
the [CLS] position times the 768 x 768 `text_projection` (not BERT's pooler output). Captions
are tokenized to 77 tokens padded to full length, and the official code passes no attention
mask, so padding positions are attended to; this adapter does the same.

Weights: hub dataset repository `axiong/pmc_oa`, either split files
(`image_encoder(resnet50).pth`: ModifiedResNet state dict, `text_encoder.pth`: BertModel state
dict, `text_projection_layer.pth`: the projection tensor) or the training `checkpoint.pt`
(`state_dict` with `module.visual.*`, `module.text_encoder.*`, `module.text_projection`).
The BERT configuration and WordPiece vocabulary come from the text model repository.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vlbench.embedding.models import hub
from vlbench.embedding.models.base import EmbeddingModel, check_precision, pick_device
from vlbench.embedding.models.checkpoints import (
    load_strict,
    read_state_dict,
    torch_load,
)
from vlbench.embedding.models.hf_clip import HfTokenizer
from vlbench.embedding.models.transforms import (
    OPENAI_PREPROCESS,
    build_image_transform,
    describe_open_clip,
)
from vlbench.errors import VlbenchError

TEXT_MODEL = hub.PMC_CLIP_TEXT_MODEL
CONTEXT_LENGTH = 77
HEAD_WIDTH = 64  # official CLIPVisionCfg.head_width: heads = width * 32 // 64
IMAGE_FILE = "image_encoder(resnet50).pth"
TEXT_FILE = "text_encoder.pth"
PROJECTION_FILE = "text_projection_layer.pth"
SPLIT_FILES = (IMAGE_FILE, TEXT_FILE, PROJECTION_FILE)
CHECKPOINT_FILE = "checkpoint.pt"
TEXT_MODEL_FILES = [
    "config.json",
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
]


class PmcClip(nn.Module):
    """Image tower, PubMedBERT and the text projection, with the official feature functions."""

    def __init__(self, visual: nn.Module, text_encoder: nn.Module, text_projection: torch.Tensor):
        super().__init__()
        self.visual = visual
        self.text_encoder = text_encoder
        self.text_projection = nn.Parameter(text_projection, requires_grad=False)

    def encode_image(self, pixels: torch.Tensor) -> torch.Tensor:
        """The attention-pooled ResNet feature (768-d for the official model)."""
        return self.visual(pixels)

    def encode_text(self, tokens: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Last hidden state at [CLS] (position 0) times the text projection."""
        hidden = self.text_encoder(input_ids=tokens["input_ids"]).last_hidden_state
        return hidden[:, 0] @ self.text_projection.to(hidden.dtype)


class PmcTokenizer(HfTokenizer):
    """PubMedBERT WordPiece, padded to `context_length` and truncated, as the official code."""

    def __call__(self, texts: list[str]) -> dict[str, torch.Tensor]:
        ids = self.encode(texts)["input_ids"]
        if not bool((ids[:, 0] == self.tokenizer.cls_token_id).all()):
            raise VlbenchError("PMC-CLIP tokenizer did not put [CLS] first")
        return {"input_ids": ids}


def _count_blocks(state: Mapping[str, torch.Tensor], layer: int) -> int:
    pattern = re.compile(rf"^layer{layer}\.(\d+)\.")
    indices = {int(m.group(1)) for key in state if (m := pattern.match(key))}
    return max(indices) + 1 if indices else 0


def build_visual(state: Mapping[str, torch.Tensor], label: str) -> nn.Module:
    """A ModifiedResNet shaped by its weights (layers, width, size, output), heads as official."""
    from open_clip.modified_resnet import ModifiedResNet

    try:
        width = int(state["conv3.weight"].shape[0])
        positions = int(state["attnpool.positional_embedding"].shape[0])
        output_dim = int(state["attnpool.c_proj.weight"].shape[0])
    except KeyError as exc:
        raise VlbenchError(
            f"model {label}: image weights lack {exc}; not a ModifiedResNet"
        ) from exc
    layers = [_count_blocks(state, i) for i in (1, 2, 3, 4)]
    grid = math.isqrt(positions - 1)
    visual = ModifiedResNet(
        layers=layers,
        output_dim=output_dim,
        heads=width * 32 // HEAD_WIDTH,
        image_size=grid * 32,
        width=width,
    )
    _load_strict(visual, dict(state), f"model {label}: image tower")
    return visual


def _load_strict(module: nn.Module, state: dict[str, torch.Tensor], what: str) -> None:
    state.pop("embeddings.position_ids", None)
    load_strict(module, state, f"{what}: weights do not fit")


def _split_weights(directory: Path) -> list[Path] | None:
    files = [directory / name for name in SPLIT_FILES]
    return files if all(path.is_file() for path in files) else None


def resolve_weights(spec: Mapping[str, Any]) -> tuple[list[Path], dict[str, Any]]:
    """The official weight files (split trio or checkpoint.pt) and where they came from."""
    label = spec.get("name", "PMC-CLIP")
    pretrained = spec.get("pretrained")
    if not pretrained:
        raise VlbenchError(f"model {label}: give 'pretrained' (hf-hub:axiong/pmc_oa or a path)")
    schema, identifier = hub.split_schema(pretrained)
    if schema == "hf-hub":
        repo_type = spec.get("repo_type", "dataset")
        revision = hub.require_revision(label, identifier, spec.get("revision"))
        files = [hub.hub_file(identifier, name, revision, repo_type) for name in SPLIT_FILES]
        return files, {"repo": identifier, "repo_type": repo_type, "revision": revision}
    path = Path(identifier)
    if path.is_dir():
        files = _split_weights(path)
        if files is None and (path / CHECKPOINT_FILE).is_file():
            files = [path / CHECKPOINT_FILE]
        if files is None:
            raise VlbenchError(
                f"model {label}: {path} holds neither the split files "
                f"({', '.join(SPLIT_FILES)}) nor {CHECKPOINT_FILE}"
            )
        return files, {"path": str(path)}
    if path.is_file():
        return [path], {"path": str(path)}
    raise VlbenchError(f"model {label}: weights not found: {pretrained}")


def resolve_text_model(spec: Mapping[str, Any]) -> tuple[Path, dict[str, Any]]:
    """A local folder with the text model's config.json and tokenizer files."""
    label = spec.get("name", "PMC-CLIP")
    text_model = spec.get("text_model", TEXT_MODEL)
    local = Path(text_model.removeprefix(hub.LOCAL_DIR_PREFIX))
    if text_model.startswith(hub.LOCAL_DIR_PREFIX) or local.is_dir():
        if not (local / "config.json").is_file():
            raise VlbenchError(f"model {label}: text_model {local} has no config.json")
        return local, {"text_model": str(local)}
    repo = text_model.removeprefix(hub.HF_HUB_PREFIX)
    revision = hub.require_revision(
        label, repo, spec.get("text_model_revision"), key="text_model_revision"
    )
    directory = hub.snapshot(repo, revision, allow_patterns=TEXT_MODEL_FILES)
    return directory, {"text_model": repo, "text_model_revision": revision}


def read_towers(
    files: list[Path], label: str
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], torch.Tensor]:
    """(image state, text state, projection) from the split trio or from checkpoint.pt."""
    if len(files) == 3:
        image, text = read_state_dict(files[0]), read_state_dict(files[1])
        if all(key.startswith("visual.") for key in image):
            image = {key.removeprefix("visual."): value for key, value in image.items()}
        projection = torch_load(files[2])
        if isinstance(projection, dict):
            projection = projection.get("text_projection", projection.get("weight"))
    else:
        state = read_state_dict(files[0])
        image = {k.removeprefix("visual."): v for k, v in state.items() if k.startswith("visual.")}
        text = {
            k.removeprefix("text_encoder."): v
            for k, v in state.items()
            if k.startswith("text_encoder.")
        }
        projection = state.get("text_projection")
    if not isinstance(projection, torch.Tensor) or projection.ndim != 2:
        raise VlbenchError(f"model {label}: no 2-d text_projection tensor in {files[-1]}")
    if not image or not text:
        raise VlbenchError(f"model {label}: {files[0]} lacks the visual or text_encoder weights")
    return image, text, projection.detach().float()


def load_pmc_clip(spec: Mapping[str, Any], device: torch.device | None = None) -> EmbeddingModel:
    """PMC-CLIP from its official weight files, with the official text feature."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    label = spec.get("name", "PMC-CLIP")
    precision = spec.get("precision", "fp32")
    device = device or pick_device()
    check_precision(label, precision, device)
    files, record = resolve_weights(spec)
    text_dir, text_record = resolve_text_model(spec)
    image_state, text_state, projection = read_towers(files, label)

    visual = build_visual(image_state, label)
    text_encoder = BertModel(BertConfig.from_pretrained(str(text_dir)))
    _load_strict(text_encoder, text_state, f"model {label}: text tower")
    hidden, embed = text_encoder.config.hidden_size, visual.output_dim
    if tuple(projection.shape) != (hidden, embed):
        raise VlbenchError(
            f"model {label}: text_projection is {tuple(projection.shape)}, expected "
            f"({hidden}, {embed})"
        )
    model = PmcClip(visual, text_encoder, projection).to(device).eval()

    context_length = int(spec.get("context_length", CONTEXT_LENGTH))
    if context_length > text_encoder.config.max_position_embeddings:
        raise VlbenchError(
            f"model {label}: context_length {context_length} exceeds the text model's "
            f"{text_encoder.config.max_position_embeddings} positions"
        )
    tokenizer = PmcTokenizer(AutoTokenizer.from_pretrained(str(text_dir)), context_length)
    image_transform = describe_open_clip({**OPENAI_PREPROCESS, "size": visual.image_size})
    return EmbeddingModel(
        model=model,
        preprocess=build_image_transform(image_transform),
        tokenizer=tokenizer,
        device=device,
        precision=precision,
        image_transform=image_transform,
        context_length=context_length,
        weights=files,
        source={"adapter": "pmc_clip", "name": label, **record, **text_record},
    )


def weights_files(spec: Mapping[str, Any]) -> list[Path]:
    """The official weight files a PMC-CLIP spec loads."""
    return resolve_weights(spec)[0]
