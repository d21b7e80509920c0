"""ImageBind's image and text towers (`imagebind_huge`), re-implemented from its published code.

Every reference below is to github.com/facebookresearch/ImageBind at commit
53680b02d7e37b19b124fa37bae4b6c98c38f5be: IM = imagebind/models/imagebind_model.py,
TR = imagebind/models/transformer.py, HE = imagebind/models/helpers.py,
MP = imagebind/models/multimodal_preprocessors.py, DA = imagebind/data.py.

Its card says the towers were initialised from OpenCLIP ViT-H and frozen, but its code builds
them itself, and the numbers are that code's: the image is repeated as two frames for a Conv3d
patch embedding of kernel and stride (2, 14, 14) without bias (IM L148-166, MP L406-442), a class
token and learned position embedding are added (MP L255-271), then a LayerNorm (IM L315-322);
both trunks are pre-norm blocks of torch's sequence-first nn.MultiheadAttention with biases and
an exact-GELU MLP of ratio 4, LayerNorm eps 1e-6, no layer scale (TR L94-170, L173-225); the
text trunk takes the token embedding plus position embedding with an additive causal mask and
no LayerNorm before it (MP L326-403, IM L323-330). Heads: image, LayerNorm then the class token
then a bias-free Linear; text, the token at the largest token id (the end-of-text), LayerNorm,
bias-free Linear (IM L378-389, HE L115-140). The text postprocessor's logit scale (HE L24-47)
multiplies unit vectors; vlbench compares unit vectors, so it is left out.

The module tree keeps the checkpoint's names (`modality_preprocessors.vision.cls_token`, ...),
so imagebind_huge.pth's image and text entries load strictly (the other modalities' are left).
Inputs as DA makes them: images resized (shorter side, bicubic) to 224, centre-cropped,
normalised with OpenAI CLIP's mean and std (DA L82-106); texts through CLIP's BPE tokenizer to
77 tokens, a longer text keeping its first 75 tokens and the end-of-text token (MP L497-603,
after the fix of commit 1125e1ec9bd8eeeec306788688e88f178c4647f7): open_clip's SimpleTokenizer
does the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vlbench.embedding.models.base import EmbeddingModel, check_precision, pick_device
from vlbench.embedding.models.checkpoints import load_strict, read_state_dict
from vlbench.embedding.models.transforms import (
    OPENAI_PREPROCESS,
    build_image_transform,
    describe_open_clip,
)
from vlbench.errors import VlbenchError

# imagebind_huge (IM L479-506) and the constructor defaults it keeps (IM L40-41).
IMAGEBIND_HUGE = {
    "vision_width": 1280,
    "vision_layers": 32,
    "vision_heads": 16,
    "text_width": 1024,
    "text_layers": 24,
    "text_heads": 16,
    "embed_dim": 1024,
    "image_size": 224,
    "patch_size": 14,
    "frames": 2,
    "context_length": 77,
    "vocab_size": 49408,
}
LAYER_NORM_EPS = 1e-6  # TR L173, L187; IM L315-322, L378-389
TOWERS = ("vision", "text")
PARTS = ("modality_preprocessors", "modality_trunks", "modality_heads")


class Mlp(nn.Module):
    """fc1, exact GELU, fc2 (TR L68-91)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, 4 * width)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """A pre-norm block on sequence-first tokens (TR L105-170)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(width, heads, bias=True)
        self.norm_1 = nn.LayerNorm(width, eps=LAYER_NORM_EPS)
        self.mlp = Mlp(width)
        self.norm_2 = nn.LayerNorm(width, eps=LAYER_NORM_EPS)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        normed = self.norm_1(x)
        x = x + self.attn(normed, normed, normed, need_weights=False, attn_mask=mask)[0]
        return x + self.mlp(self.norm_2(x))


class Trunk(nn.Module):
    """Optional LayerNorm, then the blocks on (length, batch, width) tokens (IM L290-330)."""

    def __init__(self, width: int, layers: int, heads: int, norm_first: bool) -> None:
        super().__init__()
        first = nn.LayerNorm(width, eps=LAYER_NORM_EPS) if norm_first else nn.Identity()
        self.pre_transformer_layer = nn.Sequential(first)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.pre_transformer_layer(tokens).transpose(0, 1)
        for block in self.blocks:
            x = block(x, mask)
        return x.transpose(0, 1)


class Stem(nn.Module):
    """The image repeated as `frames` frames, then a bias-free Conv3d (`proj.1`)."""

    def __init__(self, width: int, frames: int, patch: int) -> None:
        super().__init__()
        kernel = (frames, patch, patch)
        self.frames = frames
        conv = nn.Conv3d(3, width, kernel_size=kernel, stride=kernel, bias=False)
        self.proj = nn.Sequential(nn.Identity(), conv)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        video = pixels.unsqueeze(2).repeat(1, 1, self.frames, 1, 1)
        return self.proj(video).flatten(2).transpose(1, 2)


class PositionEmbedding(nn.Module):
    def __init__(self, tokens: int, width: int) -> None:
        super().__init__()
        self.pos_embed = nn.Parameter(torch.zeros(1, tokens, width))


class VisionPreprocessor(nn.Module):
    """Patch tokens, the class token first, plus the position embedding (MP L255-271)."""

    def __init__(self, dims: Mapping[str, int]) -> None:
        super().__init__()
        width = dims["vision_width"]
        patches = (dims["image_size"] // dims["patch_size"]) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, width))
        self.rgbt_stem = Stem(width, dims["frames"], dims["patch_size"])
        self.pos_embedding_helper = PositionEmbedding(patches + 1, width)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        tokens = self.rgbt_stem(pixels)
        cls = self.cls_token.expand(tokens.shape[0], -1, -1)
        return torch.cat([cls, tokens], dim=1) + self.pos_embedding_helper.pos_embed


class TextPreprocessor(nn.Module):
    """Token plus position embedding; the additive causal mask (MP L317-348, L378-403)."""

    def __init__(self, dims: Mapping[str, int]) -> None:
        super().__init__()
        length, width = dims["context_length"], dims["text_width"]
        self.token_embedding = nn.Embedding(dims["vocab_size"], width)
        self.pos_embed = nn.Parameter(torch.zeros(1, length, width))
        self.register_buffer("mask", torch.full((length, length), float("-inf")).triu_(1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.token_embedding(tokens) + self.pos_embed


class VisionHead(nn.Sequential):
    """LayerNorm, the class token, a bias-free Linear (`0`, `1`, `2`)."""

    def __init__(self, width: int, embed_dim: int) -> None:
        super().__init__(
            nn.LayerNorm(width, eps=LAYER_NORM_EPS),
            nn.Identity(),
            nn.Linear(width, embed_dim, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self[2](self[0](x)[:, 0])


class TextHead(nn.Module):
    """The end-of-text token (the largest id), LayerNorm, bias-free Linear (`proj.0`, `proj.1`)."""

    def __init__(self, width: int, embed_dim: int) -> None:
        super().__init__()
        self.proj = nn.Sequential(
            nn.LayerNorm(width, eps=LAYER_NORM_EPS), nn.Linear(width, embed_dim, bias=False)
        )

    def forward(self, x: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return self.proj(x[torch.arange(x.shape[0]), tokens.argmax(dim=-1)])


class ImageBindTowers(nn.Module):
    """`encode_image` / `encode_text` with the checkpoint's module names."""

    def __init__(self, dims: Mapping[str, int]) -> None:
        super().__init__()
        self.modality_preprocessors = nn.ModuleDict(
            {"vision": VisionPreprocessor(dims), "text": TextPreprocessor(dims)}
        )
        self.modality_trunks = nn.ModuleDict(
            {
                "vision": Trunk(
                    dims["vision_width"], dims["vision_layers"], dims["vision_heads"], True
                ),
                "text": Trunk(dims["text_width"], dims["text_layers"], dims["text_heads"], False),
            }
        )
        self.modality_heads = nn.ModuleDict(
            {
                "vision": VisionHead(dims["vision_width"], dims["embed_dim"]),
                "text": TextHead(dims["text_width"], dims["embed_dim"]),
            }
        )

    def encode_image(self, pixels: torch.Tensor) -> torch.Tensor:
        tokens = self.modality_preprocessors["vision"](pixels)
        return self.modality_heads["vision"](self.modality_trunks["vision"](tokens))

    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        preprocess = self.modality_preprocessors["text"]
        x = self.modality_trunks["text"](preprocess(tokens), preprocess.mask)
        return self.modality_heads["text"](x, tokens)


def architecture(spec: Mapping[str, Any]) -> dict[str, int]:
    """imagebind_huge's sizes, or those of a `model_config` JSON (toy sizes for tests)."""
    if not spec.get("model_config"):
        return dict(IMAGEBIND_HUGE)
    path = Path(spec["model_config"])
    try:
        given = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise VlbenchError(f"{path}: not a readable JSON file ({exc})") from exc
    unknown = sorted(set(given) - set(IMAGEBIND_HUGE))
    if unknown:
        raise VlbenchError(f"{path}: unknown ImageBind size(s) {', '.join(unknown)}")
    return {**IMAGEBIND_HUGE, **{key: int(value) for key, value in given.items()}}


def towers_state(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The image and text entries of an ImageBind checkpoint (the other modalities dropped)."""
    state = read_state_dict(checkpoint)
    return {
        key: value
        for key, value in state.items()
        if key.split(".")[0] in PARTS and key.split(".")[1:2] in (["vision"], ["text"])
    }


def load_imagebind(spec: Mapping[str, Any], device: torch.device | None = None) -> EmbeddingModel:
    """ImageBind's image and text towers from a local imagebind_huge.pth."""
    import open_clip

    name = spec.get("name", "imagebind_huge")
    precision = spec.get("precision", "fp32")
    device = device or pick_device()
    check_precision(name, precision, device)
    pretrained = spec.get("pretrained")
    if not pretrained:
        raise VlbenchError(f"model {name}: give 'pretrained', the path of imagebind_huge.pth")
    checkpoint = Path(pretrained)
    if not checkpoint.is_file():
        raise VlbenchError(f"model {name}: checkpoint file not found: {checkpoint}")
    dims = architecture(spec)
    # Built without memory and given the checkpoint's tensors (no random initialisation of
    # about a billion parameters that the checkpoint would overwrite).
    with torch.device("meta"):
        model = ImageBindTowers(dims)
    refusal = f"model {name}: {checkpoint} does not fit ImageBind's image and text towers"
    load_strict(model, towers_state(checkpoint), refusal, assign=True)
    # DA L88-98: Resize(224, bicubic), CenterCrop(224), OpenAI CLIP's mean and std.
    image_transform = describe_open_clip({**OPENAI_PREPROCESS, "size": dims["image_size"]})
    tokenizer = open_clip.tokenizer.SimpleTokenizer(context_length=dims["context_length"])
    return EmbeddingModel(
        model=model.to(device).eval(),
        preprocess=build_image_transform(image_transform),
        tokenizer=tokenizer,
        device=device,
        precision=precision,
        image_transform=image_transform,
        context_length=dims["context_length"],
        weights=[checkpoint],
        source={"adapter": "imagebind", "name": name, "pretrained": str(checkpoint)},
    )


def weights_files(spec: Mapping[str, Any]) -> list[Path]:
    """The local checkpoint an ImageBind spec loads."""
    return [Path(spec["pretrained"])]
