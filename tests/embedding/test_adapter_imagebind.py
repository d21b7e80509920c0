"""ImageBind adapter against ImageBind's own code on the same weights and inputs.

The reference is the `imagebind` package of imagebind-unofficial 0.1.1 (PyPI), whose model files
are byte-identical to github.com/facebookresearch/ImageBind at commit
53680b02d7e37b19b124fa37bae4b6c98c38f5be (a test-only dependency, installed without its declared
dependencies: its `imagebind.data` imports torchaudio and pytorchvideo, which the model code does
not need, so the test gives the package an empty `imagebind.data` before importing the model).
Its ImageBindModel is built at toy sizes (the image stays 224 x 224 in patches of 14, as
imagebind_huge's), saved as a checkpoint with every modality, and loaded by the adapter.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torchvision import transforms

from vlbench.embedding.models import hub_pins, load_model
from vlbench.errors import VlbenchError

CPU = torch.device("cpu")
TOY = {
    "vision_width": 32,
    "vision_layers": 2,
    "vision_heads": 4,
    "text_width": 24,
    "text_layers": 2,
    "text_heads": 2,
    "embed_dim": 16,
}


def reference_package() -> types.ModuleType:
    """ImageBind's model module, without its data module's video and audio libraries."""
    sys.modules.setdefault("imagebind.data", types.ModuleType("imagebind.data"))
    from imagebind.models import imagebind_model

    return imagebind_model


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> tuple[torch.nn.Module, Path, Path]:
    """The reference model at toy sizes (every modality), its checkpoint and its sizes' JSON."""
    imagebind_model = reference_package()
    torch.manual_seed(0)
    small = {"embed_dim": 16, "num_blocks": 1, "num_heads": 2}
    model = imagebind_model.ImageBindModel(
        out_embed_dim=TOY["embed_dim"],
        vision_embed_dim=TOY["vision_width"],
        vision_num_blocks=TOY["vision_layers"],
        vision_num_heads=TOY["vision_heads"],
        text_embed_dim=TOY["text_width"],
        text_num_blocks=TOY["text_layers"],
        text_num_heads=TOY["text_heads"],
        **{f"{modality}_{key}": value for modality in ("audio", "depth", "thermal", "imu")
           for key, value in small.items()},
    ).eval()  # fmt: skip
    with torch.no_grad():  # non-trivial values where the reference initialises constants
        for name, parameter in model.named_parameters():
            if "norm" in name or name.endswith("log_logit_scale") or ".0." in name:
                parameter.add_(0.1 * torch.randn_like(parameter))
    folder = tmp_path_factory.mktemp("imagebind")
    torch.save(model.state_dict(), folder / "imagebind_toy.pth")
    (folder / "sizes.json").write_text(json.dumps(TOY), encoding="utf-8")
    return model, folder / "imagebind_toy.pth", folder / "sizes.json"


def spec_for(toy) -> dict:
    _, checkpoint, sizes = toy
    return {"adapter": "imagebind", "name": "imagebind_huge", "pretrained": str(checkpoint)} | {
        "model_config": str(sizes)
    }


TEXTS = [
    "a photo of a heron",
    "Ardea cinerea &amp; its nest",  # html entity, as ImageBind's basic_clean unescapes
    "Ünïcödé  spaces\tand CAPITALS",
    " ".join(f"word{i}" for i in range(60)),  # over 77 tokens: the end-of-text token is kept
]


def test_tokens_equal_imagebinds_tokenizer() -> None:
    reference_package()
    from imagebind.models.multimodal_preprocessors import SimpleTokenizer

    bpe = Path(sys.modules["imagebind"].__path__[0]) / "bpe" / "bpe_simple_vocab_16e6.txt.gz"
    theirs = torch.stack([SimpleTokenizer(bpe_path=str(bpe))(text) for text in TEXTS])
    model_tokens = load_model_tokenizer()(TEXTS)
    assert torch.equal(model_tokens, theirs)
    assert int(theirs[3, 76]) == 49407  # end-of-text forced at the last position


def load_model_tokenizer():
    import open_clip

    return open_clip.tokenizer.SimpleTokenizer(context_length=77)


def test_image_and_text_embeddings_equal_imagebinds_forward(toy) -> None:
    reference, _, _ = toy
    model = load_model(spec_for(toy), CPU)
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (180, 250, 3), dtype=np.uint8)) for _ in "ab"]
    # imagebind/data.py L88-98 (load_and_transform_vision_data), restated: its module imports
    # pytorchvideo.
    data_transform = transforms.Compose(
        [
            transforms.Resize(224, interpolation=transforms.InterpolationMode.BICUBIC),
            transforms.CenterCrop(224),
            transforms.ToTensor(),
            transforms.Normalize(
                mean=(0.48145466, 0.4578275, 0.40821073),
                std=(0.26862954, 0.26130258, 0.27577711),
            ),
        ]
    )
    theirs_pixels = torch.stack([data_transform(image) for image in images])
    ours_pixels = torch.stack([model.preprocess(image) for image in images])
    assert (ours_pixels - theirs_pixels).abs().max() < 1e-6
    tokens = model.tokenizer(TEXTS)
    with torch.no_grad():
        out = reference({"vision": theirs_pixels, "text": tokens})
    expected_images = out["vision"].numpy()
    expected_texts = F.normalize(out["text"], dim=-1).numpy()  # theirs carry the logit scale
    ours_images = model.encode_images(ours_pixels)
    ours_texts = model.encode_texts(TEXTS)
    assert np.abs(ours_images - expected_images).max() < 1e-5
    assert np.abs(ours_texts - expected_texts).max() < 1e-5
    assert model.context_length == 77 and model.image_transform["resize_mode"] == "shortest"


def test_imagebind_huge_sizes_build_the_published_key_layout(monkeypatch) -> None:
    """The full-size towers have exactly imagebind_huge's image and text keys and shapes (both
    built without memory, on the meta device; the reference reads its drop-path rates with
    .item(), so those few numbers are made on the CPU)."""
    from vlbench.embedding.models.imagebind import IMAGEBIND_HUGE, ImageBindTowers

    linspace = torch.linspace
    monkeypatch.setattr(torch, "linspace", lambda *a, **k: linspace(*a, **k, device="cpu"))
    with torch.device("meta"):
        ours = ImageBindTowers(IMAGEBIND_HUGE)
        theirs = reference_package().imagebind_huge(pretrained=False)
    expected = {
        key: tuple(value.shape)
        for key, value in theirs.state_dict().items()
        if key.split(".")[1] in ("vision", "text") and "postprocessors" not in key
    }
    assert {key: tuple(value.shape) for key, value in ours.state_dict().items()} == expected
    assert expected["modality_preprocessors.vision.rgbt_stem.proj.1.weight"] == (1280, 3, 2, 14, 14)


def test_a_checkpoint_that_does_not_fit_is_one_line(toy, tmp_path: Path) -> None:
    reference, _, _ = toy
    state = reference.state_dict()
    del state["modality_heads.vision.2.weight"]
    state["modality_trunks.text.blocks.9.norm_1.weight"] = torch.zeros(24)
    broken = tmp_path / "broken.pth"
    torch.save(state, broken)
    with pytest.raises(VlbenchError) as info:
        load_model(spec_for(toy) | {"pretrained": str(broken)}, CPU)
    message = str(info.value)
    assert "does not fit ImageBind's image and text towers" in message and "\n" not in message
    assert "modality_heads.vision.2.weight" in message
    assert "modality_trunks.text.blocks.9.norm_1.weight" in message
    assert hub_pins(spec_for(toy)) == []  # a local file: nothing to pin
