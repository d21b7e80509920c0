"""The image geometry open_clip will give a model, predicted without importing open_clip.

Importing open_clip takes seconds (it imports torchvision and transformers), and only a built
model says how its images are resized and cropped. An embed job starts decoding its first image
shard on the predicted geometry meanwhile (`vlbench.embedding.waves.AheadPass.predicted`) and keeps
the decoded pixels only if the loaded model's geometry key equals the prediction's; otherwise the
pass is dropped and one is opened for the model. So a wrong prediction costs time, never a number.
`tests/embedding/test_open_clip_geometry.py` checks that the prediction equals the installed
open_clip's transform, so an open_clip upgrade that changes it fails the suite.

Predicted only where the preprocess follows from the spec's files alone: an architecture given by
its own config file (`model_config`) with a local checkpoint file. For such a model open_clip
builds the preprocess config from `PreprocessCfg`'s defaults (bicubic, shortest side) and the
visual tower's image size; a pretrained tag's config is merged only for tags, and a config file's
`preprocess_cfg` only for `hf-hub:` and `local-dir:` names (`open_clip.factory.create_model`).
Its inference transform for a square size is Resize(size, bicubic), CenterCrop(size), then RGB
conversion (`open_clip.transform.image_transform`, resize mode `shortest`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PIL import Image

from vlbench.embedding.image_transform import ImagePipeline
from vlbench.embedding.models.hub import looks_like_path, split_schema


def _convert_to_rgb(image: Image.Image) -> Image.Image:
    """RGB conversion, described as open_clip's (`describe_geometric_step`)."""
    return image.convert("RGB")


def square_image_size(model_config: str | Path) -> int | None:
    """The visual tower's square input size in an open_clip architecture file, or None."""
    try:
        config = json.loads(Path(model_config).read_text(encoding="utf-8"))
        size = config["vision_cfg"]["image_size"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if isinstance(size, list) and len(size) == 2 and size[0] == size[1]:
        size = size[0]
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def predicted_size(spec: Mapping[str, Any]) -> int | None:
    """The square image size of the model of `spec` when its geometry can be predicted (module
    docstring), else None; reads the architecture file only (imports nothing)."""
    if spec.get("adapter", "open_clip") != "open_clip":
        return None
    config_file, pretrained = spec.get("model_config"), spec.get("pretrained")
    if not config_file or not isinstance(pretrained, str) or not looks_like_path(pretrained):
        return None
    if split_schema(spec.get("name", ""))[0] is not None:
        return None
    return square_image_size(config_file)


def square_pipeline(size: int) -> ImagePipeline:
    """open_clip's default geometric steps for a square image size (module docstring); with
    `predicted_size`, the steps open_clip will give a model (imports torchvision's
    transforms)."""
    from torchvision.transforms import CenterCrop, Compose, InterpolationMode, Resize, ToTensor

    steps = [Resize(size, interpolation=InterpolationMode.BICUBIC), CenterCrop((size, size))]
    return ImagePipeline.from_preprocess(Compose([*steps, _convert_to_rgb, ToTensor()]))
