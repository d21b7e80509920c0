"""CLIP-family models in the Hugging Face `transformers` layout (CLIPModel, SiglipModel, ...)
that open_clip cannot load, pinned to a hub commit or read from a local folder.

The model must offer `get_image_features` and `get_text_features`; captions are padded to the
model's full text length (how SigLIP was trained) and images go through the repository's own
image processor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vlbench.embedding.models import hub
from vlbench.embedding.models.base import EmbeddingModel, check_precision, pick_device
from vlbench.embedding.models.transforms import describe_hf_processor, hf_processor_transform
from vlbench.errors import VlbenchError

WEIGHT_NAMES = ("model.safetensors", "pytorch_model.bin")
SMALL_FILES = ["*.json", "*.txt", "*.model"]


def _features(output: Any) -> torch.Tensor:
    """Projected features from a transformers feature call (tensor, or output with pooler)."""
    if isinstance(output, torch.Tensor):
        return output
    return output.pooler_output


class HfClip(nn.Module):
    """`encode_image` / `encode_text` over a transformers dual encoder."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def encode_image(self, pixels: torch.Tensor) -> torch.Tensor:
        return _features(self.model.get_image_features(pixel_values=pixels))

    def encode_text(self, tokens: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return _features(self.model.get_text_features(**tokens))


class HfTokenizer:
    """Tokenize to the full context length; keep only inputs the model's text call takes."""

    def __init__(self, tokenizer: Any, context_length: int):
        self.tokenizer = tokenizer
        self.context_length = context_length

    def encode(self, texts: list[str]) -> dict[str, torch.Tensor]:
        """Pad to and truncate at the context length, as tensors."""
        return self.tokenizer(
            list(texts),
            padding="max_length",
            truncation=True,
            max_length=self.context_length,
            return_tensors="pt",
        )

    def __call__(self, texts: list[str]) -> dict[str, torch.Tensor]:
        encoded = self.encode(texts)
        return {k: v for k, v in encoded.items() if k in ("input_ids", "attention_mask")}


def resolve_hf_dir(spec: Mapping[str, Any]) -> tuple[Path, dict[str, Any]]:
    """The local folder of a transformers model: a pinned hub snapshot or `local-dir:`."""
    name = spec["name"]
    schema, identifier = hub.split_schema(name)
    if schema == "hf-hub":
        revision = hub.require_revision(name, identifier, spec.get("revision"))
        directory = hub.snapshot(identifier, revision, allow_patterns=SMALL_FILES)
        if not any((directory / weights).is_file() for weights in WEIGHT_NAMES):
            last_error: VlbenchError | None = None
            for weights in WEIGHT_NAMES:
                try:
                    directory = hub.hub_file(identifier, weights, revision).parent
                    break
                except VlbenchError as error:
                    last_error = error
            else:
                assert last_error is not None
                raise last_error
        return directory, {"repo": identifier, "revision": revision}
    directory = Path(identifier)
    if not directory.is_dir():
        raise VlbenchError(f"model {name}: directory not found: {directory}")
    return directory, {"path": str(directory)}


def weight_files(directory: Path) -> list[Path]:
    """The weights file of a transformers model folder."""
    for weights in WEIGHT_NAMES:
        if (directory / weights).is_file():
            return [directory / weights]
    raise VlbenchError(f"{directory}: no {' or '.join(WEIGHT_NAMES)}")


@dataclass(frozen=True)
class HfFolder:
    """A transformers model folder ready to load: where, from where, and how to run it."""

    name: str
    precision: str
    device: torch.device
    directory: Path
    record: dict[str, Any]
    files: list[Path]


def open_hf_folder(spec: Mapping[str, Any], device: torch.device | None) -> HfFolder:
    """Check the precision on the device, then resolve the folder and its weights file."""
    name = spec["name"]
    precision = spec.get("precision", "fp32")
    device = device or pick_device()
    check_precision(name, precision, device)
    directory, record = resolve_hf_dir(spec)
    return HfFolder(name, precision, device, directory, record, weight_files(directory))


def load_hf_clip(spec: Mapping[str, Any], device: torch.device | None = None) -> EmbeddingModel:
    """A transformers CLIP-family model with its own tokenizer and image processor."""
    from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

    folder = open_hf_folder(spec, device)
    name, directory = folder.name, folder.directory
    try:
        model = AutoModel.from_pretrained(str(directory), dtype=torch.float32)
        processor = AutoImageProcessor.from_pretrained(str(directory))
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
    except (OSError, ValueError, KeyError) as exc:
        raise VlbenchError(f"model {name}: cannot load ({str(exc).splitlines()[0]})") from exc
    if not hasattr(model, "get_image_features") or not hasattr(model, "get_text_features"):
        raise VlbenchError(f"model {name}: {type(model).__name__} is not a dual encoder")
    trained_length = int(model.config.text_config.max_position_embeddings)
    context_length = int(spec.get("context_length", trained_length))
    if context_length > trained_length:
        raise VlbenchError(
            f"model {name}: context_length {context_length} exceeds the {trained_length} text "
            "positions the model was trained with"
        )
    image_transform = describe_hf_processor(processor)
    return EmbeddingModel(
        model=HfClip(model).to(folder.device).eval(),
        preprocess=hf_processor_transform(processor),
        tokenizer=HfTokenizer(tokenizer, context_length),
        device=folder.device,
        precision=folder.precision,
        image_transform=image_transform,
        context_length=context_length,
        weights=folder.files,
        source={"adapter": "hf_clip", "name": name, "class": type(model).__name__, **folder.record},
    )


def weights_files(spec: Mapping[str, Any]) -> list[Path]:
    """The weight files of a transformers model folder (downloaded if pinned on the hub)."""
    return weight_files(resolve_hf_dir(spec)[0])
