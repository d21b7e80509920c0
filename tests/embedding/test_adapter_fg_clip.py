"""FG-CLIP adapter: a tiny checkpoint in FG-CLIP's published layout, against the reference path.

FG-CLIP's own code cannot be imported with the installed transformers (it imports
`transformers.onnx`, which transformers 5 removed), so the reference is what that code computes
for captions of up to 77 tokens, stated with the library it subclasses: transformers' CLIPModel
on the same weights, fed as FG-CLIP's scripts feed it (the tokenizer to 77 tokens padded,
`input_ids` only; `image.resize((224, 224))` then the repository's CLIPImageProcessor).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from vlbench.embedding.models import hub_pins, load_model
from vlbench.embedding.models.fg_clip import FG_CLIP_ONLY_KEYS
from vlbench.errors import VlbenchError

CPU = torch.device("cpu")
LETTERS = "abcdefghijklmnopqrstuvwxyz"
HIDDEN, PROJECTION = 16, 8


def write_fg_clip_repo(directory: Path, drop: str | None = None, extra: str | None = None) -> Path:
    """The qihoo360/fg-clip-base file layout at toy size: config.json naming the remote-code
    classes, model.safetensors with CLIP's keys and FG-CLIP's own, tokenizer files and the
    repository's preprocessor_config.json (its real values)."""
    from safetensors.torch import save_file
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTokenizer

    directory.mkdir(parents=True)
    vocab = ["<|startoftext|>", "<|endoftext|>", *LETTERS, *(c + "</w>" for c in LETTERS)]
    (directory / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}))
    (directory / "merges.txt").write_text("#version: 0.2\n")
    CLIPTokenizer(str(directory / "vocab.json"), str(directory / "merges.txt")).save_pretrained(
        directory
    )
    config = CLIPConfig(
        text_config={
            "vocab_size": len(vocab),
            "hidden_size": HIDDEN,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 77,
        },
        vision_config={
            "hidden_size": HIDDEN,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 224,
            "patch_size": 32,
        },
        projection_dim=PROJECTION,
    )
    saved = config.to_dict() | {
        "architectures": ["FGCLIPModel"],
        "auto_map": {
            "AutoConfig": "modeling_fgclip.FGCLIPConfig",
            "AutoModelForCausalLM": "modeling_fgclip.FGCLIPModel",
        },
    }
    (directory / "config.json").write_text(json.dumps(saved))
    torch.manual_seed(0)
    state = dict(CLIPModel(config).state_dict())
    state |= {
        "text_model.embeddings.position_embedding_res.weight": torch.randn(248, HIDDEN),
        "text_model.embeddings.position_embedding_ori.weight": torch.randn(248, HIDDEN),
        "text_filip_projection.weight": torch.randn(PROJECTION, HIDDEN),
        "logit_scale_finegraind": torch.tensor(2.0),
        "logit_scale_hardneg": torch.tensor(2.0),
    }
    if drop:
        del state[drop]
    if extra:
        state[extra] = torch.zeros(2)
    save_file({k: v.contiguous() for k, v in state.items()}, directory / "model.safetensors")
    # qihoo360/fg-clip-base preprocessor_config.json (commit c8e599b): size 224, crop 224,
    # resample 3 (bicubic), OpenAI CLIP mean and std.
    CLIPImageProcessor(
        size={"shortest_edge": 224},
        crop_size={"height": 224, "width": 224},
        resample=3,
        image_mean=[0.48145466, 0.4578275, 0.40821073],
        image_std=[0.26862954, 0.26130258, 0.27577711],
    ).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return write_fg_clip_repo(tmp_path_factory.mktemp("fg") / "fg-clip-base")


def reference_clip(directory: Path):
    """transformers' CLIPModel with the checkpoint's CLIP weights (FG-CLIP's short path)."""
    from safetensors.torch import load_file
    from transformers import CLIPConfig, CLIPModel

    config = CLIPConfig.from_pretrained(directory)
    config.text_config.eos_token_id = 1  # the toy vocabulary's <|endoftext|>
    model = CLIPModel(config).eval()
    state = load_file(str(directory / "model.safetensors"))
    model.load_state_dict({k: v for k, v in state.items() if k not in FG_CLIP_ONLY_KEYS})
    return model


def test_short_caption_path_equals_clip_on_the_same_weights_and_inputs(repo: Path) -> None:
    from transformers import AutoTokenizer, CLIPImageProcessor

    model = load_model({"adapter": "fg_clip", "name": f"local-dir:{repo}"}, CPU)
    reference = reference_clip(repo)
    captions = ["a cat", "blue fish swimming", "x"]
    ids = AutoTokenizer.from_pretrained(repo)(
        captions, max_length=77, padding="max_length", truncation=True
    ).input_ids
    with torch.no_grad():
        out = reference.get_text_features(input_ids=torch.tensor(ids, dtype=torch.long))
    expected = F.normalize(getattr(out, "pooler_output", out), dim=-1).numpy()
    texts = model.encode_texts(captions, trim_padding=False)
    assert np.abs(texts - expected).max() < 1e-5

    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (90, 140, 3), dtype=np.uint8)) for _ in "ab"]
    processor = CLIPImageProcessor.from_pretrained(repo)
    pixels = torch.cat(
        [
            processor.preprocess(i.resize((224, 224)), return_tensors="pt")["pixel_values"]
            for i in images
        ]
    )
    ours = torch.stack([model.preprocess(image) for image in images])
    assert (ours - pixels).abs().max() < 1e-5  # squash to 224 x 224, bicubic; the same mean/std
    with torch.no_grad():
        out = reference.get_image_features(pixel_values=pixels)
    expected = F.normalize(getattr(out, "pooler_output", out), dim=-1).numpy()
    assert np.abs(model.encode_images(ours) - expected).max() < 1e-5
    assert model.context_length == 77 and model.image_transform["resize_mode"] == "squash"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"drop": "text_filip_projection.weight"},
            "is not an FG-CLIP checkpoint (it lacks text_filip",
        ),
        ({"drop": "visual_projection.weight"}, "1 missing key(s): visual_projection.weight"),
        ({"extra": "roi_projection.weight"}, "1 unexpected key(s): roi_projection.weight"),
    ],
)
def test_a_checkpoint_of_another_layout_is_one_line(tmp_path: Path, change: dict, message) -> None:
    folder = write_fg_clip_repo(tmp_path / "repo", **change)
    with pytest.raises(VlbenchError) as info:
        load_model({"adapter": "fg_clip", "name": f"local-dir:{folder}"}, CPU)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_hub_repository_is_pinned_like_any_other() -> None:
    spec = {"adapter": "fg_clip", "name": "hf-hub:qihoo360/fg-clip-base"}
    assert hub_pins(spec) == [("revision", "qihoo360/fg-clip-base", "model")]
    with pytest.raises(VlbenchError, match="not pinned"):
        load_model(spec, CPU)
