"""What every adapter returns: a loaded model that turns images and texts into unit vectors."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from vlbench.errors import VlbenchError

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def pick_device() -> torch.device:
    """CUDA when a GPU is visible to this process, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def check_precision(label: str, precision: str, device: torch.device) -> None:
    """Refuse an unknown precision, and fp16 on the CPU (autocast there only supports bf16)."""
    if precision not in PRECISIONS:
        raise VlbenchError(
            f"model {label}: precision {precision!r} is not one of {', '.join(PRECISIONS)}"
        )
    if precision == "fp16" and device.type == "cpu":
        raise VlbenchError(f"model {label}: fp16 needs a GPU; use fp32 or bf16 on the CPU")


class BadEmbeddings(VlbenchError):
    """A batch with rows that cannot be normalised; `rows` are their positions in the batch.

    The embedding job names the model, the file and the items (vlbench.embedding.encode).
    """

    def __init__(self, rows: list[int], reason: str) -> None:
        super().__init__(f"{reason} (batch rows {rows[:5]})")
        self.rows, self.reason = rows, reason


def normalise(features: torch.Tensor) -> np.ndarray:
    """L2-normalise rows in float32; fail if a model produced NaN, infinite or zero vectors."""
    features = features.float()
    finite = torch.isfinite(features).all(dim=-1)
    if not finite.all():
        rows = torch.nonzero(~finite).flatten().tolist()
        raise BadEmbeddings(rows, "the model produced NaN or infinite embeddings")
    norms = features.norm(dim=-1, keepdim=True)
    if (norms == 0).any():
        rows = torch.nonzero(norms.flatten() == 0).flatten().tolist()
        raise BadEmbeddings(rows, "the model produced an all-zero embedding")
    return (features / norms).cpu().numpy().astype(np.float32, copy=False)


def _to_device(tokens: Any, device: torch.device) -> Any:
    if isinstance(tokens, Mapping):
        return {key: value.to(device) for key, value in tokens.items()}
    return tokens.to(device)


def filling_context(tokens: Any, pad_id: int = 0, end_id: int | None = None) -> np.ndarray:
    """Which tokenized texts fill the whole context, i.e. were (or may have been) truncated.

    With an `attention_mask` (Hugging Face tokenizers), a row fills the context when its last
    position is not padding. Otherwise the ids are read: a row fills it when its last id is not
    the padding id (`pad_id`: 0 for open_clip's tokenizer and BERT's), or, where the padding id
    is also the end-of-text id (`end_id`: CLIP's tokenizer in transformers pads with
    `<|endoftext|>`, 49407), when the id before the last is not that id either (a full row ends
    with one end token right after a text token; a shorter one with the end token and padding).
    """
    if isinstance(tokens, Mapping) and tokens.get("attention_mask") is not None:
        return (tokens["attention_mask"][:, -1] == 1).cpu().numpy()
    ids = tokens["input_ids"] if isinstance(tokens, Mapping) else tokens
    if pad_id == end_id and ids.shape[1] > 1:
        return (ids[:, -2] != pad_id).cpu().numpy()
    return (ids[:, -1] != pad_id).cpu().numpy()


def padding_ids(tokenizer: Any) -> tuple[int, int | None]:
    """The ids a tokenizer pads with and ends a text with: a Hugging Face tokenizer's own (or
    that of the one a wrapper holds as `tokenizer`); open_clip's `SimpleTokenizer` pads with 0
    and ends with `<|endoftext|>`."""
    for candidate in (tokenizer, getattr(tokenizer, "tokenizer", None)):
        pad = getattr(candidate, "pad_token_id", None)
        if pad is not None:
            end = getattr(candidate, "eos_token_id", None)
            return int(pad), getattr(candidate, "sep_token_id", None) if end is None else end
    return 0, getattr(tokenizer, "eot_token_id", None)


@dataclass
class EmbeddingModel:
    """A loaded model with what it needs to turn images and texts into unit vectors.

    `model` has `encode_image(pixels)` and `encode_text(tokens)`; `tokenizer(texts)` returns
    what `encode_text` takes. `image_transform` describes `preprocess` (see
    `vlbench.embedding.models.transforms`), so pixels can be cached once per transform.
    `weights` are the files the weights were read from; `source` records where they came
    from (adapter, hub repo and resolved commit). `padding_trimmed_text_encoder`, where the
    text tower allows it, encodes tokens without their padding (`models.causal_text`).
    `pad_token_id` and `end_token_id`: the ids the tokenizer pads with and ends a text with
    (where they are the same id, `filling_context` reads the ids accordingly).
    """

    model: torch.nn.Module
    preprocess: Callable[[Image.Image], torch.Tensor]
    tokenizer: Callable[[list[str]], Any]
    device: torch.device
    precision: str
    image_transform: dict[str, Any] = field(default_factory=dict)
    context_length: int | None = None
    weights: list[Path] = field(default_factory=list)
    source: dict[str, Any] = field(default_factory=dict)
    padding_trimmed_text_encoder: Callable[[Any], torch.Tensor] | None = None
    pad_token_id: int | None = None
    end_token_id: int | None = None

    def __post_init__(self) -> None:
        if self.pad_token_id is None:
            self.pad_token_id, self.end_token_id = padding_ids(self.tokenizer)

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

    def trims_text_padding(self, allowed: bool = True) -> bool:
        """Whether `encode_texts(..., trim_padding=allowed)` skips the padding."""
        return allowed and self.padding_trimmed_text_encoder is not None

    def tokenize(self, texts: list[str]) -> Any:
        """The tokens `encode_tokens` takes, on the CPU."""
        return self.tokenizer(list(texts))

    def filling_context(self, tokens: Any) -> np.ndarray:
        """Which of the tokenized texts fill the whole context (`filling_context`)."""
        return filling_context(tokens, self.pad_token_id or 0, self.end_token_id)

    def encode_tokens(self, tokens: Any, trim_padding: bool = True) -> np.ndarray:
        """Encode tokenized captions; return L2-normalised float32 rows.

        With `trim_padding`, a causal text tower runs each text only up to its last token
        (same embeddings, up to float rounding); other towers always run the full context.
        """
        tokens = _to_device(tokens, self.device)
        encode = (
            self.padding_trimmed_text_encoder
            if self.trims_text_padding(trim_padding)
            else self.model.encode_text
        )
        with self._inference():
            features = encode(tokens)
        return normalise(features)

    def encode_texts(self, texts: list[str], trim_padding: bool = True) -> np.ndarray:
        """Tokenize and encode captions (`encode_tokens`)."""
        return self.encode_tokens(self.tokenize(texts), trim_padding)
