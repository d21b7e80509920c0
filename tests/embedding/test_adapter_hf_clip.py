"""transformers adapter: a tiny CLIPModel saved in the Hugging Face repository layout."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from vlbench.embedding.models import build_image_transform, load_model
from vlbench.errors import VlbenchError

CPU = torch.device("cpu")
LETTERS = "abcdefghijklmnopqrstuvwxyz"
REVISION = "0123456789abcdef0123456789abcdef01234567"


def write_clip_repo(directory: Path) -> None:
    """config.json + model.safetensors + CLIP BPE tokenizer files + preprocessor_config.json."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTokenizer

    directory.mkdir(parents=True)
    vocab = ["<|startoftext|>", "<|endoftext|>", *LETTERS, *(c + "</w>" for c in LETTERS)]
    (directory / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}))
    (directory / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(str(directory / "vocab.json"), str(directory / "merges.txt"))
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    config = CLIPConfig(
        text_config={
            "vocab_size": len(vocab),
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 16,
            "bos_token_id": 0,
            "eos_token_id": 1,
            "pad_token_id": 1,
        },
        vision_config={
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
        },
        projection_dim=8,
    )
    CLIPModel(config).save_pretrained(directory)
    CLIPImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    ).save_pretrained(directory)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("hf") / "clip"
    write_clip_repo(path)
    return path


def test_clip_directory_loads_and_matches_transformers(repo: Path) -> None:
    from transformers import CLIPModel, CLIPTokenizer

    model = load_model({"adapter": "hf_clip", "name": f"local-dir:{repo}"}, CPU)
    assert model.weights == [repo / "model.safetensors"] and model.context_length == 16
    captions = ["a cat", "blue fish"]
    texts = model.encode_texts(captions)
    assert texts.shape == (2, 8) and texts.dtype == np.float32
    reference = CLIPModel.from_pretrained(repo).eval()
    tokens = CLIPTokenizer.from_pretrained(repo)(
        captions, padding="max_length", max_length=16, truncation=True, return_tensors="pt"
    )
    with torch.no_grad():
        out = reference.get_text_features(
            input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"]
        )
    expected = out if isinstance(out, torch.Tensor) else out.pooler_output
    np.testing.assert_allclose(texts, F.normalize(expected, dim=-1).numpy(), atol=1e-5)

    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 60, 3), dtype=np.uint8))
    pixels = model.preprocess(image).unsqueeze(0)
    assert pixels.shape == (1, 3, 32, 32)
    images = model.encode_images(pixels)
    np.testing.assert_allclose(np.linalg.norm(images, axis=1), 1.0, rtol=1e-5)


def test_transform_description_rebuilds_the_processor(repo: Path) -> None:
    model = load_model({"adapter": "hf_clip", "name": f"local-dir:{repo}"}, CPU)
    description = model.image_transform
    assert description["builder"] == "transformers" and description["size"] == [32, 32]
    assert description["crop"] == "center" and description["interpolation"] == "bicubic"
    image = Image.fromarray(np.random.default_rng(1).integers(0, 256, (50, 33, 3), dtype=np.uint8))
    rebuilt = build_image_transform(json.loads(json.dumps(description)))
    torch.testing.assert_close(rebuilt(image), model.preprocess(image))


def test_context_length_beyond_the_model_is_refused(repo: Path) -> None:
    with pytest.raises(VlbenchError, match="context_length 64 exceeds"):
        load_model({"adapter": "hf_clip", "name": f"local-dir:{repo}", "context_length": 64}, CPU)


def test_hub_name_needs_a_pin() -> None:
    with pytest.raises(VlbenchError, match="not pinned"):
        load_model({"adapter": "hf_clip", "name": "hf-hub:google/siglip-base-patch16-224"}, CPU)


def test_hub_snapshot_at_revision(repo: Path, loopback_hub) -> None:
    sha = loopback_hub.commit_folder("model", "org/clip", repo)
    model = load_model({"adapter": "hf_clip", "name": "hf-hub:org/clip", "revision": sha}, CPU)
    assert model.source["revision"] == sha
    assert loopback_hub.served("GET", f"/api/models/org/clip/tree/{sha}") == [200]
