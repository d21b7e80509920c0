"""BioCAP-style checkpoints with a taxonomic and a caption image projection."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from vlbench.embedding.models import load_model
from vlbench.errors import VlbenchError

CPU = torch.device("cpu")
TINY = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
    "text_cfg": {"context_length": 12, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


def write_repo(directory: Path, dual: bool) -> dict[str, torch.Tensor]:
    """An open_clip hub-layout folder; with `dual`, the BioCAP fork's extra tensors too."""
    import open_clip

    torch.manual_seed(0)
    state = open_clip.CLIP(**TINY).state_dict()
    if dual:
        state["visual.caption_proj"] = torch.randn_like(state["visual.proj"])
        state["logit_scale_caption"] = torch.tensor(2.0)
    directory.mkdir()
    config = {"model_cfg": TINY, "preprocess_cfg": {}}
    (directory / "open_clip_config.json").write_text(json.dumps(config), encoding="utf-8")
    torch.save(state, directory / "open_clip_pytorch_model.bin")
    return state


@pytest.mark.parametrize(
    ("choice", "key"),
    [(None, "visual.proj"), ("taxonomic", "visual.proj"), ("caption", "visual.caption_proj")],
)
def test_two_projection_checkpoint_loads_the_chosen_projection(tmp_path: Path, choice, key) -> None:
    state = write_repo(tmp_path / "repo", dual=True)
    spec = {"name": f"local-dir:{tmp_path / 'repo'}"} | (
        {"image_projection": choice} if choice else {}
    )
    model = load_model(spec, CPU)
    torch.testing.assert_close(model.model.visual.proj, state[key])
    assert model.source["image_projection"] == (choice or "taxonomic")


def test_caption_projection_changes_image_features_only(tmp_path: Path) -> None:
    write_repo(tmp_path / "repo", dual=True)
    name = f"local-dir:{tmp_path / 'repo'}"
    taxonomic = load_model({"name": name}, CPU)
    caption = load_model({"name": name, "image_projection": "caption"}, CPU)
    pixels = torch.rand(2, 3, 32, 32)
    assert not np.allclose(taxonomic.encode_images(pixels), caption.encode_images(pixels))
    np.testing.assert_allclose(taxonomic.encode_texts(["a bird"]), caption.encode_texts(["a bird"]))


def test_caption_projection_refused_for_a_single_projection_checkpoint(tmp_path: Path) -> None:
    write_repo(tmp_path / "repo", dual=False)
    spec = {"name": f"local-dir:{tmp_path / 'repo'}", "image_projection": "caption"}
    with pytest.raises(VlbenchError, match="only one image projection"):
        load_model(spec, CPU)


def test_unknown_projection_name_is_refused(tmp_path: Path) -> None:
    write_repo(tmp_path / "repo", dual=True)
    with pytest.raises(VlbenchError, match="image_projection must be one of"):
        load_model({"name": f"local-dir:{tmp_path / 'repo'}", "image_projection": "both"}, CPU)
