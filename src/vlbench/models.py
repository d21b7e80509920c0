"""Load CLIP-style models through open_clip: tags, hf-hub ids, local checkpoints, custom configs."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from vlbench.atomic import atomic_path
from vlbench.errors import VlbenchError

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npz")


def pick_device() -> torch.device:
    """CUDA when a GPU is visible to this process, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def register_model_config(name: str, model_config: str | Path) -> None:
    """Make a custom open_clip architecture JSON loadable under `name` (the file's stem)."""
    import open_clip

    path = Path(model_config)
    if not path.is_file():
        raise VlbenchError(f"model_config file not found: {path}")
    if path.stem != name:
        raise VlbenchError(
            f"model_config {path}: open_clip registers it as '{path.stem}', "
            f"so the model name must be '{path.stem}', not '{name}'"
        )
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise VlbenchError(f"model_config {path}: not valid JSON ({exc})") from exc
    open_clip.add_model_config(path)


def looks_like_path(pretrained: str) -> bool:
    """Whether a `pretrained` string names a local file rather than an open_clip tag."""
    return "/" in pretrained or pretrained.endswith(CHECKPOINT_SUFFIXES)


@dataclass
class EmbeddingModel:
    """A loaded model with what it needs to turn images and texts into unit vectors."""

    model: torch.nn.Module
    preprocess: Callable[[Image.Image], torch.Tensor]
    tokenizer: Callable[[list[str]], torch.Tensor]
    device: torch.device
    precision: str

    @contextlib.contextmanager
    def _inference(self) -> Iterator[None]:
        dtype = PRECISIONS[self.precision]
        with torch.inference_mode():
            if dtype is None:
                yield
            else:
                with torch.autocast(device_type=self.device.type, dtype=dtype):
                    yield

    def encode_images(self, pixels: torch.Tensor) -> np.ndarray:
        """Encode a preprocessed batch; return L2-normalised float32 rows."""
        with self._inference():
            features = self.model.encode_image(pixels.to(self.device, non_blocking=True))
        return normalise(features)

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        """Tokenize and encode captions; return L2-normalised float32 rows."""
        tokens = self.tokenizer(texts).to(self.device)
        with self._inference():
            features = self.model.encode_text(tokens)
        return normalise(features)


def normalise(features: torch.Tensor) -> np.ndarray:
    """L2-normalise rows in float32; fail if a model produced NaN, infinite or zero vectors."""
    features = features.float()
    if not torch.isfinite(features).all():
        raise VlbenchError("the model produced NaN or infinite embeddings")
    norms = features.norm(dim=-1, keepdim=True)
    if (norms == 0).any():
        raise VlbenchError("the model produced an all-zero embedding, which cannot be normalised")
    return (features / norms).cpu().numpy().astype(np.float32, copy=False)


def load_open_clip(spec: Mapping[str, Any], device: torch.device | None = None) -> EmbeddingModel:
    """Create an open_clip model from a spec: name, pretrained, model_config, precision."""
    import open_clip

    name = spec["name"]
    pretrained = spec.get("pretrained")
    precision = spec.get("precision", "fp32")
    device = device or pick_device()
    if precision == "fp16" and device.type == "cpu":
        raise VlbenchError(f"model {name}: fp16 needs a GPU; use fp32 or bf16 on the CPU")
    if spec.get("model_config"):
        register_model_config(name, spec["model_config"])
    if pretrained and looks_like_path(pretrained) and not Path(pretrained).is_file():
        raise VlbenchError(f"model {name}: checkpoint file not found: {pretrained}")
    try:
        model, _, preprocess = open_clip.create_model_and_transforms(
            name, pretrained=pretrained, device=device, weights_only=True
        )
        tokenizer = open_clip.get_tokenizer(name)
    except RuntimeError as exc:
        raise VlbenchError(
            f"model {name} (pretrained={pretrained}): {str(exc).splitlines()[0]}"
        ) from exc
    model.eval()
    return EmbeddingModel(model, preprocess, tokenizer, device, precision)


def write_random_checkpoint(
    name: str, model_config: str | Path, seed: int, out_path: str | Path
) -> None:
    """Save seeded random weights of a custom architecture as an open_clip state-dict checkpoint."""
    import open_clip

    register_model_config(name, model_config)
    torch.manual_seed(seed)
    model = open_clip.create_model(name, pretrained=None, device="cpu")
    with atomic_path(out_path) as tmp:
        torch.save(model.state_dict(), tmp)
