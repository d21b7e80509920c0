"""The image geometry predicted from a model's files equals the one open_clip builds."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from embed_support import photo_jpeg
from PIL import Image

from vlbench.embedding.image_transform import ImagePipeline
from vlbench.embedding.models import load_model, write_random_checkpoint
from vlbench.embedding.models.open_clip_geometry import (
    predicted_size,
    square_image_size,
    square_pipeline,
)

ARCHITECTURE = {
    "embed_dim": 16,
    "vision_cfg": {"layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
    "text_cfg": {"context_length": 12, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


def architecture(folder: Path, name: str, image_size: object) -> dict[str, str]:
    """A spec of a custom architecture with a local random checkpoint."""
    config = folder / f"{name}.json"
    vision = {**ARCHITECTURE["vision_cfg"], "image_size": image_size}
    config.write_text(json.dumps({**ARCHITECTURE, "vision_cfg": vision}), encoding="utf-8")
    checkpoint = folder / f"{name}.pt"
    write_random_checkpoint(name, config, 0, checkpoint)
    return {"name": name, "model_config": str(config), "pretrained": str(checkpoint)}


@pytest.mark.parametrize("image_size", [32, 48, [64, 64]])
def test_the_prediction_is_the_geometry_open_clip_builds(tmp_path: Path, image_size) -> None:
    spec = architecture(tmp_path, f"vlbench-geometry-{len(str(image_size))}", image_size)
    size = predicted_size(spec)
    assert size is not None
    predicted = square_pipeline(size)
    built = ImagePipeline.from_model(load_model(spec, torch.device("cpu")))
    assert predicted.cacheable
    assert predicted.geometry == built.geometry
    assert predicted.geometry_key(False) == built.geometry_key(False)
    assert predicted.geometry_key(True) == built.geometry_key(True)
    rng = np.random.default_rng(0)
    for width, height in ((97, 61), (40, 120), (64, 64)):
        image = Image.open(io.BytesIO(photo_jpeg(rng, width, height)))
        assert np.array_equal(predicted.to_pixels(image), built.to_pixels(image))


def test_nothing_is_predicted_where_the_files_do_not_decide(tmp_path: Path) -> None:
    spec = architecture(tmp_path, "vlbench-geometry-wide", [32, 48])
    assert predicted_size(spec) is None  # not square: open_clip resizes keeping the ratio
    square = architecture(tmp_path, "vlbench-geometry-square", 32)
    assert predicted_size(square) == 32
    assert predicted_size({**square, "pretrained": "openai"}) is None  # a tag's own config
    assert predicted_size({**square, "adapter": "hf_clip"}) is None
    assert predicted_size({**square, "name": "hf-hub:org/repo"}) is None
    assert predicted_size({**square, "model_config": str(tmp_path / "missing.json")}) is None
    assert predicted_size({"name": "ViT-B-32", "pretrained": "openai"}) is None
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    assert square_image_size(tmp_path / "broken.json") is None
