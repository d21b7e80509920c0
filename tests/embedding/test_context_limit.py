"""Texts at the context limit: counted per text shard, and only those that really fill the
context, whichever way each adapter's tokenizer pads (open_clip with 0, CLIP's tokenizer in
transformers with `<|endoftext|>`, 49407, with or without an attention mask)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import open_clip
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from embed_support import tiny_model

from vlbench.data.canonical import TEXTS_SCHEMA
from vlbench.embedding import waves
from vlbench.embedding.identity import embedding_identity
from vlbench.embedding.job import run_plan
from vlbench.embedding.models import EmbeddingModel
from vlbench.embedding.models.fg_clip import InputIdsTokenizer
from vlbench.embedding.models.hf_clip import HfTokenizer
from vlbench.embedding.models.pmc_clip import PmcTokenizer
from vlbench.embedding.plan import EmbedJob, Pair, plan_job
from vlbench.embedding.settings import EmbedSettings

CONTEXT = 77
# "cat" is one token in CLIP's vocabulary and in the BERT vocabulary below, so n words are n
# tokens, plus the start and end tokens: 75 words fill the 77 positions exactly.
SHORT, ONE_SHORT, FULL, LONG = (" ".join(["cat"] * n) for n in (3, CONTEXT - 3, CONTEXT - 2, 200))
TEXTS = [SHORT, ONE_SHORT, FULL, LONG]
FILLING = [False, False, True, True]


@pytest.fixture(scope="module")
def clip_vocabulary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CLIP's BPE vocabulary (the one open_clip ships) as transformers' CLIPTokenizer files."""
    simple = open_clip.tokenizer.SimpleTokenizer()
    folder = tmp_path_factory.mktemp("clip-vocab")
    # open_clip names the two special tokens its own way; CLIP's files name them so.
    names = {"<start_of_text>": "<|startoftext|>", "<end_of_text>": "<|endoftext|>"}
    vocabulary = {names.get(token, token): index for token, index in simple.encoder.items()}
    (folder / "vocab.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    merges = sorted(simple.bpe_ranks, key=simple.bpe_ranks.__getitem__)
    lines = ["#version: 0.2", *(" ".join(pair) for pair in merges)]
    (folder / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def clip_tokenizer(folder: Path):
    from transformers import CLIPTokenizer

    tokenizer = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    assert tokenizer.pad_token_id == tokenizer.eos_token_id == 49407
    return tokenizer


def bert_tokenizer(folder: Path):
    from transformers import BertTokenizer

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cat"]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    return BertTokenizer(str(folder / "vocab.txt"))


def model_with(tokenizer) -> EmbeddingModel:
    """A model whose only part in use is the tokenizer an adapter gives it."""
    return EmbeddingModel(torch.nn.Identity(), lambda image: image, tokenizer, "cpu", "fp32")


def adapter_tokenizers(clip: Path, bert: Path) -> dict[str, object]:
    """The tokenizer each adapter hands its `EmbeddingModel` (open_clip_adapter, hf_clip,
    fg_clip, pmc_clip, imagebind), at 77 tokens."""
    return {
        "open_clip": open_clip.get_tokenizer("ViT-B-32"),
        "hf_clip": HfTokenizer(clip_tokenizer(clip), CONTEXT),
        "fg_clip": InputIdsTokenizer(clip_tokenizer(clip), CONTEXT),
        "pmc_clip": PmcTokenizer(bert_tokenizer(bert), CONTEXT),
        "imagebind": open_clip.tokenizer.SimpleTokenizer(context_length=CONTEXT),
    }


@pytest.mark.parametrize("adapter", ["open_clip", "hf_clip", "fg_clip", "pmc_clip", "imagebind"])
def test_only_texts_at_the_context_length_are_counted(
    adapter: str, clip_vocabulary: Path, tmp_path: Path
) -> None:
    model = model_with(adapter_tokenizers(clip_vocabulary, tmp_path)[adapter])
    tokens = model.tokenize(TEXTS)
    ids = tokens["input_ids"] if isinstance(tokens, dict) else tokens
    assert tuple(ids.shape) == (len(TEXTS), CONTEXT)
    # The fixture is sharp: the 76-token text ends in padding, the 77-token one does not.
    assert model.filling_context(tokens).tolist() == FILLING


def test_fg_clips_ids_without_a_mask_pad_with_the_end_token(clip_vocabulary: Path) -> None:
    """Read as padded with 0, every FG-CLIP caption would count as cut off."""
    tokens = InputIdsTokenizer(clip_tokenizer(clip_vocabulary), CONTEXT)(TEXTS)
    assert list(tokens) == ["input_ids"]
    assert bool((tokens["input_ids"][:, -1] != 0).all())  # what the old count saw
    assert model_with(InputIdsTokenizer(clip_tokenizer(clip_vocabulary), CONTEXT)).end_token_id == (
        49407
    )


def write_captions(path: Path, captions: list[str]) -> Path:
    ids = [f"txt-{row:03d}" for row in range(len(captions))]
    nulls = pa.nulls(len(captions), pa.string())
    pq.write_table(pa.table([ids, captions, nulls], schema=TEXTS_SCHEMA), path)
    return path


def test_each_text_shard_records_its_own_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One job, one model, two benchmarks: only the first has texts at the context limit; the
    second's shards record 0, and each of the first's records its own rows (copies counted)."""
    from embed_support import write_images

    model = tiny_model()
    monkeypatch.setattr(waves, "load_model", lambda spec, device=None: model)
    images = tmp_path / "images.parquet"
    write_images(images, 4, row_group_size=4)
    long_texts = write_captions(tmp_path / "long.parquet", [LONG, SHORT, FULL, FULL, SHORT, SHORT])
    short_texts = write_captions(tmp_path / "short.parquet", [SHORT, ONE_SHORT, SHORT, SHORT])
    settings = EmbedSettings.from_config(batch_size=2, shard_size=3, pixel_cache=False)
    spec = {"name": "vlbench-tiny"}
    pairs = {
        ("tiny", bench): Pair(
            spec=spec,
            identity=embedding_identity(spec, "", asdict(settings)),
            sources={"image": images, "text": texts},
            resume_dir=tmp_path / bench / "shards",
            shard_list=tmp_path / bench / "shards.json",
        )
        for bench, texts in (("long", long_texts), ("short", short_texts))
    }
    records = run_plan(plan_job(EmbedJob(settings, pairs)))
    counts = {
        bench: [record["texts_at_context_limit"] for record in records["tiny", bench]["text"]]
        for bench in ("long", "short")
    }
    assert counts == {"long": [2, 1], "short": [0, 0]}
    stored = json.loads((tmp_path / "short" / "shards" / "text" / "shard-00001.json").read_text())
    assert stored["texts_at_context_limit"] == 0
