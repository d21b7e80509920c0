"""Padding-trimmed text encoding equals open_clip's full-context `encode_text`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import open_clip
import pytest
import torch
from embed_support import TINY_CONFIG, tiny_model, write_texts

from vlbench.embedding.encode import embed_shard
from vlbench.embedding.models import load_model
from vlbench.embedding.models.causal_text import (
    BUCKET_TOKENS,
    PaddingTrimmedTextEncoder,
    bucketed_lengths,
    is_causal_clip_text_tower,
    padding_trimmed_text_encoder,
)
from vlbench.embedding.models.open_clip_adapter import write_random_checkpoint
from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_files import Shard
from vlbench.embedding.waves import LoadedModel

TEXT_CFG = {"context_length": 77, "vocab_size": 1000, "width": 64, "heads": 2, "layers": 3}
VISION_CFG = {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16}


def random_tokens(rows: int, seed: int, context: int = 77) -> torch.Tensor:
    """Token rows like open_clip's tokenizer makes: SOT, words, EOT (the largest id), zeros.

    Lengths range from 2 tokens to rows that fill the whole context (truncated texts).
    """
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.zeros(rows, context, dtype=torch.long)
    for row in range(rows):
        length = int(torch.randint(2, context + 1, (1,), generator=generator))
        if row % 5 == 0:
            length = context
        tokens[row, 0] = 998
        tokens[row, 1 : length - 1] = torch.randint(1, 998, (length - 2,), generator=generator)
        tokens[row, length - 1] = 999
    return tokens


def seeded_clip(seed: int, **text_overrides: object) -> open_clip.CLIP:
    torch.manual_seed(seed)
    return open_clip.CLIP(
        embed_dim=32, vision_cfg=VISION_CFG, text_cfg={**TEXT_CFG, **text_overrides}
    ).eval()


@pytest.mark.parametrize("quick_gelu", [False, True])
def test_trimmed_features_equal_full_context_encode_text(quick_gelu: bool) -> None:
    torch.manual_seed(3)
    model = open_clip.CLIP(
        embed_dim=32, vision_cfg=VISION_CFG, text_cfg=TEXT_CFG, quick_gelu=quick_gelu
    ).eval()
    tokens = random_tokens(40, seed=1)
    assert is_causal_clip_text_tower(model)
    with torch.inference_mode():
        full = model.encode_text(tokens)
        trimmed = PaddingTrimmedTextEncoder(model)(tokens)
    assert trimmed.shape == full.shape
    torch.testing.assert_close(trimmed, full, rtol=1e-5, atol=1e-5)


def test_trimmed_features_keep_row_order_and_each_row_alone_matches() -> None:
    model = seeded_clip(4)
    tokens = random_tokens(12, seed=2)
    encoder = PaddingTrimmedTextEncoder(model)
    with torch.inference_mode():
        together = encoder(tokens)
        alone = torch.cat([model.encode_text(tokens[row : row + 1]) for row in range(12)])
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)


def test_bucketed_lengths_cover_the_last_token_and_ignore_the_batch() -> None:
    tokens = random_tokens(30, seed=5)
    lengths = bucketed_lengths(tokens)
    for row in range(30):
        last = int(torch.nonzero(tokens[row]).max()) + 1
        alone = int(bucketed_lengths(tokens[row : row + 1])[0])
        assert alone == int(lengths[row])
        assert last <= alone <= 77
        assert alone == 77 or alone % BUCKET_TOKENS == 0
        assert alone - last < BUCKET_TOKENS


def test_eos_pooling_tower_is_trimmed_exactly() -> None:
    model = seeded_clip(6)
    model.text_pool_type = "eos"
    model.text_eos_id = 999
    tokens = random_tokens(16, seed=7)
    assert is_causal_clip_text_tower(model)
    with torch.inference_mode():
        torch.testing.assert_close(
            PaddingTrimmedTextEncoder(model)(tokens),
            model.encode_text(tokens),
            rtol=1e-5,
            atol=1e-5,
        )


def test_towers_that_see_their_padding_are_not_trimmed() -> None:
    bidirectional = open_clip.CustomTextCLIP(
        embed_dim=32,
        vision_cfg=VISION_CFG,
        text_cfg={**TEXT_CFG, "no_causal_mask": True, "pool_type": "last"},
    )
    assert not is_causal_clip_text_tower(bidirectional)
    assert padding_trimmed_text_encoder(bidirectional) is None
    last_token = seeded_clip(0)
    last_token.text_pool_type = "last"
    assert not is_causal_clip_text_tower(last_token)
    not_causal = seeded_clip(0)
    not_causal.attn_mask = torch.zeros_like(not_causal.attn_mask)
    assert not is_causal_clip_text_tower(not_causal)

    class OwnTextPath(open_clip.CLIP):
        def encode_text(self, text: torch.Tensor, normalize: bool = False) -> torch.Tensor:
            return super().encode_text(text, normalize)

    custom = OwnTextPath(embed_dim=32, vision_cfg=VISION_CFG, text_cfg=TEXT_CFG)
    assert not is_causal_clip_text_tower(custom)
    assert not is_causal_clip_text_tower(torch.nn.Linear(2, 2))


def test_loaded_open_clip_model_trims_and_matches_the_full_context(tmp_path: Path) -> None:
    checkpoint = tmp_path / "tiny.pt"
    write_random_checkpoint("vlbench-tiny", TINY_CONFIG, 5, checkpoint)
    model = load_model(
        {"name": "vlbench-tiny", "model_config": str(TINY_CONFIG), "pretrained": str(checkpoint)},
        torch.device("cpu"),
    )
    assert model.trims_text_padding()
    assert not model.trims_text_padding(allowed=False)
    captions = ["a cell", "H&E stain of liver tissue showing necrosis, x40", "word " * 90]
    np.testing.assert_allclose(
        model.encode_texts(captions), model.encode_texts(captions, trim_padding=False), atol=1e-6
    )


def test_shard_provenance_says_whether_padding_was_trimmed(tmp_path: Path) -> None:
    texts = tmp_path / "texts.parquet"
    write_texts(texts, 9, row_group_size=4)
    model = tiny_model()
    model.padding_trimmed_text_encoder = padding_trimmed_text_encoder(model.model)
    assert model.padding_trimmed_text_encoder is not None
    records = {}
    matrices = {}
    for trim in (True, False):
        settings = EmbedSettings.from_config(batch_size=4, trim_text_padding=trim)
        loaded = LoadedModel.of(model, {"model": {"name": "tiny"}}, settings)
        _, matrices[trim], records[trim] = embed_shard(
            loaded, Shard("text", texts, 0, 0, 9), settings
        )
        assert records[trim]["text_padding_trimmed"] is trim
    assert records[True]["settings"]["trim_text_padding"] is True
    np.testing.assert_allclose(matrices[True], matrices[False], atol=1e-6)
