"""PMC-CLIP adapter: official architecture, official text feature, official checkpoint files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vlbench.embedding.models import load_model
from vlbench.errors import VlbenchError

CPU = torch.device("cpu")
WORDS = ["cell", "tumor", "stain", "blue", "tissue", "the", "a", "of", "##s", "nucleus"]
# PubMedBERT's vocabulary puts [CLS] at id 2; keep that here.
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
REVISION = "0123456789abcdef0123456789abcdef01234567"
WIDTH, EMBED, HIDDEN = 8, 16, 16


def write_text_model(directory: Path) -> None:
    """A tiny BERT in the hub layout of the PubMedBERT repository (config + WordPiece vocab)."""
    from transformers import BertConfig

    directory.mkdir(parents=True)
    config = BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=HIDDEN,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=128,
    )
    config.save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": True, "tokenizer_class": "BertTokenizer"}), encoding="utf-8"
    )


def official_towers(text_dir: Path, seed: int = 0):
    """Random official-shaped towers: ModifiedResNet (layers 1-1-1-1, width 8, 64 px), BERT."""
    from open_clip.modified_resnet import ModifiedResNet
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    visual = ModifiedResNet(
        layers=[1, 1, 1, 1], output_dim=EMBED, heads=WIDTH * 32 // 64, image_size=64, width=WIDTH
    )
    for module in visual.modules():  # non-trivial batch-norm statistics
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    text = BertModel(BertConfig.from_pretrained(text_dir))
    projection = torch.randn(HIDDEN, EMBED)
    return visual.eval(), text.eval(), projection


def write_split_files(directory: Path, visual, text, projection) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    torch.save(visual.state_dict(), directory / "image_encoder(resnet50).pth")
    torch.save(text.state_dict(), directory / "text_encoder.pth")
    torch.save(torch.nn.Parameter(projection), directory / "text_projection_layer.pth")


def write_training_checkpoint(path: Path, visual, text, projection) -> None:
    """The official training checkpoint: DDP `module.` keys plus heads evaluation ignores."""
    state = {f"module.visual.{k}": v for k, v in visual.state_dict().items()}
    state |= {f"module.text_encoder.{k}": v for k, v in text.state_dict().items()}
    state["module.text_projection"] = projection
    state["module.logit_scale"] = torch.tensor(2.6)
    state["module.img_special_token"] = torch.zeros(1, 1, EMBED)
    state["module.fusion_module.resblocks.0.ln_1.weight"] = torch.ones(HIDDEN)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": 100, "name": "pmc_clip", "state_dict": state}, path)


@pytest.fixture
def text_dir(tmp_path: Path) -> Path:
    path = tmp_path / "pubmedbert"
    write_text_model(path)
    return path


def reference_text_features(text, projection, text_dir: Path, captions: list[str]) -> np.ndarray:
    """Independent: BertTokenizer to 77 tokens, no attention mask, [CLS] state @ projection."""
    from transformers import BertTokenizer

    tokenizer = BertTokenizer(str(text_dir / "vocab.txt"), do_lower_case=True)
    ids = tokenizer(
        captions, padding="max_length", truncation=True, max_length=77, return_tensors="pt"
    )["input_ids"]
    with torch.no_grad():
        cls_state = text(input_ids=ids).last_hidden_state[:, 0]
    return F.normalize(cls_state @ projection, dim=-1).numpy()


@pytest.mark.parametrize("layout", ["split", "checkpoint"])
def test_official_files_load_and_text_feature_is_cls_times_projection(tmp_path, text_dir, layout):
    visual, text, projection = official_towers(text_dir)
    weights = tmp_path / "pmc_oa"
    if layout == "split":
        write_split_files(weights, visual, text, projection)
    else:
        write_training_checkpoint(weights / "checkpoint.pt", visual, text, projection)
    spec = {
        "adapter": "pmc_clip",
        "name": "PMC-CLIP",
        "pretrained": str(weights),
        "text_model": str(text_dir),
    }
    model = load_model(spec, CPU)

    captions = ["a blue cell", "the tumor stains of the tissue nucleus"]
    texts = model.encode_texts(captions)
    assert texts.shape == (2, EMBED) and texts.dtype == np.float32
    np.testing.assert_allclose(
        texts, reference_text_features(text, projection, text_dir, captions), atol=1e-5
    )
    with torch.no_grad():  # BERT's pooler output is a different feature
        pooled = text(input_ids=model.tokenizer(captions)["input_ids"]).pooler_output
    assert not np.allclose(texts, F.normalize(pooled @ projection, dim=-1).numpy(), atol=1e-3)

    pixels = torch.rand(3, 3, 64, 64)
    images = model.encode_images(pixels)
    with torch.no_grad():
        expected = F.normalize(visual(pixels), dim=-1).numpy()
    np.testing.assert_allclose(images, expected, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(images, axis=1), 1.0, rtol=1e-5)


def test_attention_pool_heads_follow_the_official_formula(tmp_path, text_dir):
    visual, text, projection = official_towers(text_dir)
    write_split_files(tmp_path / "w", visual, text, projection)
    model = load_model(
        {"adapter": "pmc_clip", "pretrained": str(tmp_path / "w"), "text_model": str(text_dir)}, CPU
    )
    assert model.model.visual.attnpool.num_heads == WIDTH * 32 // 64
    assert model.image_transform["size"] == [64, 64]
    assert (
        model.image_transform["resize_mode"] == "shortest"
        and model.image_transform["crop"] == "center"
    )


def test_tokens_are_padded_to_77_with_cls_first(tmp_path, text_dir):
    visual, text, projection = official_towers(text_dir)
    write_split_files(tmp_path / "w", visual, text, projection)
    model = load_model(
        {"adapter": "pmc_clip", "pretrained": str(tmp_path / "w"), "text_model": str(text_dir)}, CPU
    )
    ids = model.tokenizer(["a cell"])["input_ids"]
    assert ids.shape == (1, 77) and int(ids[0, 0]) == VOCAB.index("[CLS]")
    assert model.context_length == 77


def test_hub_weights_are_fetched_at_the_pinned_revision(tmp_path, text_dir, loopback_hub):
    visual, text, projection = official_towers(text_dir)
    write_split_files(tmp_path / "hub", visual, text, projection)
    text_repo = "microsoft/BiomedNLP-PubMedBERT-base-uncased-abstract-fulltext"
    weights_sha = loopback_hub.commit_folder("dataset", "axiong/pmc_oa", tmp_path / "hub")
    text_sha = loopback_hub.commit_folder("model", text_repo, text_dir)
    spec = {
        "adapter": "pmc_clip",
        "pretrained": "hf-hub:axiong/pmc_oa",
        "revision": weights_sha,
        "text_model": text_repo,
        "text_model_revision": text_sha,
    }
    model = load_model(spec, CPU)
    resolve = f"/datasets/axiong/pmc_oa/resolve/{weights_sha}/text_projection_layer.pth"
    assert loopback_hub.served("GET", resolve) == [200]
    assert loopback_hub.served("GET", f"/api/models/{text_repo}/tree/{text_sha}") == [200]
    assert model.source["repo"] == "axiong/pmc_oa" and len(model.weights) == 3


def test_unpinned_hub_weights_are_refused(text_dir):
    spec = {
        "adapter": "pmc_clip",
        "pretrained": "hf-hub:axiong/pmc_oa",
        "text_model": str(text_dir),
    }
    with pytest.raises(VlbenchError, match="axiong/pmc_oa is not pinned"):
        load_model(spec, CPU)


def test_mismatched_projection_is_refused(tmp_path, text_dir):
    visual, text, _ = official_towers(text_dir)
    write_split_files(tmp_path / "w", visual, text, torch.randn(HIDDEN, EMBED + 1))
    with pytest.raises(VlbenchError, match="text_projection is"):
        load_model(
            {"adapter": "pmc_clip", "pretrained": str(tmp_path / "w"), "text_model": str(text_dir)},
            CPU,
        )


def test_folder_without_official_files_is_refused(tmp_path, text_dir):
    (tmp_path / "empty").mkdir()
    with pytest.raises(VlbenchError, match="holds neither"):
        load_model(
            {
                "adapter": "pmc_clip",
                "pretrained": str(tmp_path / "empty"),
                "text_model": str(text_dir),
            },
            CPU,
        )
