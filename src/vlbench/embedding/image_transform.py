"""Split a model's image preprocess into a cacheable geometric part and a per-model tensor part.

The geometric part (resize, crop, pad, mode conversion: PIL image in, PIL image out) turns a
decoded image (RGB, or its original mode under a decode policy that converts late) into the
exact uint8 pixels the model sees. The tensor part (to-tensor and normalisation) is cheap and
per-model, so the pixel cache stores the geometric output and applies the tensor part on the
fly, in the same float32 operations torchvision performs.

`ImagePipeline.from_model` is the one place that reads a model's transform; when models carry an
`image_transform` description it can read that instead.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image

Step = Callable[[Image.Image], Any]

TO_TENSOR_NAMES = {"ToTensor", "MaybeToTensor"}
PIL_CONVERT_NAMES = {"MaybeConvertMode", "_convert_to_rgb"}


def _interpolation(step: Any) -> str:
    mode = getattr(step, "interpolation", None)
    return str(getattr(mode, "value", mode))


def _size(value: Any) -> Any:
    return list(value) if isinstance(value, Sequence) else value


def describe_geometric_step(step: Any) -> dict[str, Any] | None:
    """A JSON description of one PIL-to-PIL preprocess step, or None if it is not one we know."""
    name = type(step).__name__
    if name == "function":
        name = step.__name__
    if name == "Resize":
        return {
            "op": "resize",
            "size": _size(step.size),
            "interpolation": _interpolation(step),
            "max_size": step.max_size,
            "antialias": step.antialias,
        }
    if name == "CenterCrop":
        return {"op": "center_crop", "size": _size(step.size)}
    if name == "ResizeKeepRatio":
        if step.random_scale_prob or step.random_aspect_prob:
            return None
        return {
            "op": "resize_keep_ratio",
            "size": _size(step.size),
            "longest": step.longest,
            "interpolation": _interpolation(step),
        }
    if name == "CenterCropOrPad":
        return {"op": "center_crop_or_pad", "size": _size(step.size), "fill": step.fill}
    if name in PIL_CONVERT_NAMES and getattr(step, "mode", "RGB") == "RGB":
        return {"op": "convert", "mode": "RGB"}
    return None


def _summary(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue-level view of a geometry: size, interpolation, resize mode, crop, fill."""
    summary: dict[str, Any] = {"size": None, "interpolation": None, "resize_mode": None}
    summary.update({"crop": None, "fill": None})
    for step in steps:
        if step["op"] == "resize":
            summary["size"] = step["size"]
            summary["interpolation"] = step["interpolation"]
            summary["resize_mode"] = "shortest" if isinstance(step["size"], int) else "squash"
        elif step["op"] == "resize_keep_ratio":
            summary["size"] = step["size"]
            summary["interpolation"] = step["interpolation"]
            summary["resize_mode"] = "longest" if step["longest"] else "shortest"
        elif step["op"] in ("center_crop", "center_crop_or_pad"):
            summary["size"] = step["size"]
            summary["crop"] = "center" if step["op"] == "center_crop" else "center_or_pad"
            summary["fill"] = step.get("fill")
    return summary


def _target_side(size: Any) -> int | None:
    if isinstance(size, int):
        return size
    if isinstance(size, list) and size:
        return max(int(v) for v in size)
    return None


@dataclass
class ImagePipeline:
    """A preprocess seen as geometric PIL steps, then to-tensor and optional normalisation."""

    preprocess: Callable[[Image.Image], torch.Tensor]
    geometric: list[Step] = field(default_factory=list)
    geometry: list[dict[str, Any]] = field(default_factory=list)
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    cacheable: bool = False
    reason: str = ""

    @classmethod
    def from_preprocess(cls, preprocess: Callable[[Image.Image], torch.Tensor]) -> ImagePipeline:
        """Recognise a torchvision Compose of known steps; anything else stays uncacheable."""
        steps = getattr(preprocess, "transforms", None)
        if steps is None:
            return cls(preprocess, reason="the preprocess is not a torchvision Compose")
        geometric: list[Step] = []
        geometry: list[dict[str, Any]] = []
        rest = list(steps)
        while rest and type(rest[0]).__name__ not in TO_TENSOR_NAMES:
            described = describe_geometric_step(rest[0])
            if described is None:
                return cls(preprocess, reason=f"unknown preprocess step {rest[0]!r}")
            geometric.append(rest.pop(0))
            geometry.append(described)
        if not rest:
            return cls(preprocess, reason="the preprocess has no ToTensor step")
        rest.pop(0)
        mean = std = None
        if rest and type(rest[0]).__name__ == "Normalize" and not rest[0].inplace:
            normalize = rest.pop(0)
            mean, std = tuple(normalize.mean), tuple(normalize.std)
        if rest:
            return cls(preprocess, reason=f"unknown tensor step {rest[0]!r}")
        return cls(preprocess, geometric, geometry, mean, std, cacheable=True)

    @classmethod
    def from_model(cls, model: Any) -> ImagePipeline:
        """The pipeline of a loaded `EmbeddingModel` (read from its `preprocess`)."""
        return cls.from_preprocess(model.preprocess)

    @property
    def summary(self) -> dict[str, Any]:
        """Size, interpolation, resize mode, crop and fill, plus the normalisation."""
        return {**_summary(self.geometry), "mean": self.mean, "std": self.std}

    def geometry_key(self, draft: bool) -> str:
        """A short stable hash of the geometric steps (and draft decoding): the cache key."""
        payload = json.dumps({"steps": self.geometry, "draft": draft}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def draft_size(self) -> tuple[int, int] | None:
        """The smallest size a draft JPEG decode may reduce to without upsampling later."""
        side = _target_side(_summary(self.geometry)["size"])
        return (side, side) if side else None

    def to_pixels(self, image: Image.Image) -> np.ndarray:
        """Apply the geometric steps to a decoded image: uint8 array, height x width x 3.

        An image decoded in its original mode (decode policy `after`) goes through the steps
        as it is, and is converted to RGB after them if no step did (open_clip's does).
        """
        for step in self.geometric:
            image = step(image)
        if image.mode != "RGB":
            image = image.convert("RGB")
        pixels = np.array(image, dtype=np.uint8)
        if pixels.ndim != 3 or pixels.shape[2] != 3:
            raise ValueError(f"expected an RGB image after the geometric steps, got {pixels.shape}")
        return pixels

    def to_model_input(
        self, pixels: torch.Tensor, reuse: torch.Tensor | None = None
    ) -> torch.Tensor:
        """uint8 batch (N, H, W, 3) -> float32 (N, 3, H, W), exactly as ToTensor + Normalize.

        `reuse`: the previous batch's result, overwritten when it has this batch's shape (the
        caller is done with it): a float32 batch of 224 px images is 38 MB, and a fresh one
        per batch costs more than the conversion itself.
        """
        shape = (pixels.shape[0], pixels.shape[3], pixels.shape[1], pixels.shape[2])
        fits = (
            reuse is not None
            and tuple(reuse.shape) == shape
            and reuse.dtype == torch.float32
            and reuse.device == pixels.device
        )
        batch = reuse if fits else torch.empty(shape, dtype=torch.float32, device=pixels.device)
        batch.copy_(pixels.permute(0, 3, 1, 2))  # uint8 -> float32 is exact
        batch.div_(255)
        if self.mean is not None and self.std is not None:
            mean = torch.as_tensor(self.mean, dtype=batch.dtype, device=batch.device)
            std = torch.as_tensor(self.std, dtype=batch.dtype, device=batch.device)
            batch.sub_(mean.view(-1, 1, 1)).div_(std.view(-1, 1, 1))
        return batch
