"""Describe a model's image preprocessing as plain data, and rebuild the transform from it.

The description is a JSON-serialisable dict, equal for two models exactly when their
preprocessing is equal, so decoded-and-transformed pixels can be cached once per description:

- `builder`: `open_clip` (torchvision pipeline built by open_clip) or `transformers`
  (a Hugging Face image processor, rebuilt from `processor`).
- `size`: `[height, width]` of the output tensor.
- `interpolation`: `bicubic` or `bilinear`.
- `resize_mode`: `shortest` (shortest edge to size, then centre crop), `longest` (longest edge
  to size, then centre pad with `fill`) or `squash` (resize to size, aspect ratio ignored).
- `crop`: `center` or `none`.
- `mean`, `std`: per-channel normalisation; `fill`: padding value for `longest`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from PIL import Image

from vlbench.errors import VlbenchError

RESIZE_MODES = ("shortest", "longest", "squash")
INTERPOLATIONS = ("bicubic", "bilinear")
# PIL resample codes that Hugging Face image processors store.
PIL_RESAMPLE = {2: "bilinear", 3: "bicubic"}
# OpenAI CLIP's inference transform (shorter side to 224, bicubic, centre crop, its mean and
# std), which PMC-CLIP and ImageBind keep: an open_clip preprocess config.
OPENAI_PREPROCESS = {
    "size": 224,
    "mean": (0.48145466, 0.4578275, 0.40821073),
    "std": (0.26862954, 0.26130258, 0.27577711),
    "interpolation": "bicubic",
    "resize_mode": "shortest",
}


def _pair(size: Any) -> list[int]:
    if isinstance(size, int):
        return [size, size]
    height, width = size
    return [int(height), int(width)]


def describe_open_clip(preprocess_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The description of an open_clip inference transform from its preprocess config."""
    resize_mode = preprocess_cfg.get("resize_mode", "shortest")
    interpolation = preprocess_cfg.get("interpolation", "bicubic")
    if resize_mode not in RESIZE_MODES or interpolation not in INTERPOLATIONS:
        raise VlbenchError(
            f"unsupported open_clip preprocessing: resize_mode={resize_mode!r}, "
            f"interpolation={interpolation!r}"
        )
    return {
        "builder": "open_clip",
        "size": _pair(preprocess_cfg.get("size", 224)),
        "interpolation": interpolation,
        "resize_mode": resize_mode,
        "crop": "none" if resize_mode == "squash" else "center",
        "mean": [float(v) for v in preprocess_cfg["mean"]],
        "std": [float(v) for v in preprocess_cfg["std"]],
        "fill": int(preprocess_cfg.get("fill_color", 0)),
    }


def describe_hf_processor(processor: Any) -> dict[str, Any]:
    """The description of a Hugging Face CLIP-family image processor (exact: keeps its config)."""
    config = processor.to_dict()
    size = config.get("size") or {}
    crop_size = config.get("crop_size") or {}
    center_crop = bool(config.get("do_center_crop", False))
    if center_crop:
        out = [crop_size["height"], crop_size["width"]]
        resize_mode = "shortest"
    elif "height" in size:
        out = [size["height"], size["width"]]
        resize_mode = "squash"
    else:
        raise VlbenchError(f"unsupported image processor size {size!r} without a centre crop")
    return {
        "builder": "transformers",
        "size": [int(v) for v in out],
        "interpolation": PIL_RESAMPLE.get(config.get("resample"), str(config.get("resample"))),
        "resize_mode": resize_mode,
        "crop": "center" if center_crop else "none",
        "mean": [float(v) for v in config["image_mean"]],
        "std": [float(v) for v in config["image_std"]],
        "fill": 0,
        "processor": config,
    }


def hf_processor_transform(processor: Any) -> Callable[[Image.Image], torch.Tensor]:
    """One RGB PIL image -> the processor's float32 CHW tensor."""

    def transform(image: Image.Image) -> torch.Tensor:
        return processor(images=image.convert("RGB"), return_tensors="pt")["pixel_values"][0]

    return transform


def build_image_transform(description: Mapping[str, Any]) -> Callable[[Image.Image], torch.Tensor]:
    """Rebuild the exact inference transform a description was made from."""
    builder = description.get("builder")
    if builder == "open_clip":
        from open_clip.transform import image_transform

        return image_transform(
            image_size=tuple(description["size"]),
            is_train=False,
            mean=tuple(description["mean"]),
            std=tuple(description["std"]),
            resize_mode=description["resize_mode"],
            interpolation=description["interpolation"],
            fill_color=description["fill"],
        )
    if builder == "transformers":
        import transformers

        config = dict(description["processor"])
        cls = getattr(transformers, config.get("image_processor_type", ""), None)
        if cls is None:
            raise VlbenchError(
                f"unknown image processor type {config.get('image_processor_type')!r}"
            )
        return hf_processor_transform(cls.from_dict(config))
    raise VlbenchError(f"unknown image transform builder {builder!r}")
