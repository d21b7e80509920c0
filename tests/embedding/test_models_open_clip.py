"""open_clip adapter: every checkpoint layout loads through `load_model`, pinned and guarded."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vlbench.embedding.models import (
    build_image_transform,
    hub_pins,
    load_model,
    model_provenance,
    weights_files,
    write_random_checkpoint,
)
from vlbench.embedding.models import quickgelu as quickgelu_module
from vlbench.errors import VlbenchError

CPU = torch.device("cpu")
TINY = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
    "text_cfg": {"context_length": 12, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}
REVISION = "0123456789abcdef0123456789abcdef01234567"


def tiny_state(seed: int, model_cfg: dict = TINY) -> dict[str, torch.Tensor]:
    """Seeded random weights of the tiny architecture, built by open_clip itself."""
    import open_clip

    torch.manual_seed(seed)
    model = open_clip.CLIP(**model_cfg)
    return model.state_dict()


def write_hub_repo(directory: Path, state: dict, fmt: str = "bin", preprocess: dict | None = None):
    """A folder in the open_clip hub-repository layout (config + weights)."""
    directory.mkdir(parents=True)
    config = {"model_cfg": TINY, "preprocess_cfg": preprocess or {}}
    (directory / "open_clip_config.json").write_text(json.dumps(config), encoding="utf-8")
    if fmt == "safetensors":
        from safetensors.torch import save_file

        save_file(
            {k: v.contiguous() for k, v in state.items()}, directory / "open_clip_model.safetensors"
        )
    else:
        torch.save(state, directory / "open_clip_pytorch_model.bin")
    return directory


def random_image(seed: int, size: tuple[int, int] = (50, 40)) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))


def assert_unit_rows(matrix: np.ndarray, rows: int, dim: int) -> None:
    assert matrix.shape == (rows, dim)
    assert matrix.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("fmt", ["bin", "safetensors"])
def test_local_dir_hub_layout_loads_its_weights(tmp_path: Path, fmt: str) -> None:
    state = tiny_state(1)
    repo = write_hub_repo(tmp_path / "repo", state, fmt)
    model = load_model({"name": f"local-dir:{repo}"}, CPU)
    loaded = model.model.state_dict()
    for key in ("visual.proj", "text_projection", "token_embedding.weight"):
        torch.testing.assert_close(loaded[key], state[key])
    pixels = torch.stack([model.preprocess(random_image(i)) for i in range(3)])
    assert_unit_rows(model.encode_images(pixels), 3, 16)
    assert_unit_rows(model.encode_texts(["a cell", "a leaf"]), 2, 16)
    assert model.context_length == 12


def test_text_features_match_open_clip_directly(tmp_path: Path) -> None:
    import open_clip

    state = tiny_state(2)
    repo = write_hub_repo(tmp_path / "repo", state)
    model = load_model({"name": f"local-dir:{repo}"}, CPU)
    reference = open_clip.CLIP(**TINY)
    reference.load_state_dict(state)
    tokens = open_clip.SimpleTokenizer(context_length=12)(["a blue cell"])
    expected = torch.nn.functional.normalize(reference.encode_text(tokens), dim=-1)
    np.testing.assert_allclose(
        model.encode_texts(["a blue cell"]), expected.detach().numpy(), atol=1e-5
    )


def test_image_transform_description_rebuilds_the_same_transform(tmp_path: Path) -> None:
    preprocess = {
        "mean": [0.5] * 3,
        "std": [0.25] * 3,
        "resize_mode": "squash",
        "interpolation": "bilinear",
    }
    repo = write_hub_repo(tmp_path / "repo", tiny_state(3), preprocess=preprocess)
    model = load_model({"name": f"local-dir:{repo}"}, CPU)
    description = model.image_transform
    assert description["size"] == [32, 32]
    assert description["resize_mode"] == "squash" and description["crop"] == "none"
    assert description["mean"] == [0.5] * 3 and description["std"] == [0.25] * 3
    assert description["interpolation"] == "bilinear"
    json.dumps(description)  # plain data, usable as a cache key
    image = random_image(4, (70, 30))
    torch.testing.assert_close(build_image_transform(description)(image), model.preprocess(image))
    # squash keeps no aspect ratio: a 70x30 image fills the whole 32x32 output
    assert model.preprocess(image).shape == (3, 32, 32)


def test_hf_hub_name_downloads_at_the_pinned_revision(tmp_path: Path, loopback_hub) -> None:
    """Through the real client, from a loopback hub whose branch has moved on since the pin."""
    sha = loopback_hub.commit_folder(
        "model", "org/tiny", write_hub_repo(tmp_path / "repo", tiny_state(5))
    )
    loopback_hub.commit_folder("model", "org/tiny", write_hub_repo(tmp_path / "new", tiny_state(6)))
    model = load_model({"name": "hf-hub:org/tiny", "revision": sha}, CPU)
    assert model.source["repo"] == "org/tiny" and model.source["revision"] == sha
    (weights,) = model.weights
    assert weights.name == "open_clip_pytorch_model.bin" and sha in str(weights)
    assert loopback_hub.served("GET", f"/org/tiny/resolve/{sha}/open_clip_pytorch_model.bin")
    assert not [path for _, path, _ in loopback_hub.requests if "/resolve/main/" in path]


def test_a_weights_file_inside_a_hub_repository_loads_at_the_pinned_revision(
    tmp_path: Path, loopback_hub
) -> None:
    """BioTrove-CLIP's layout: several checkpoints beside the repository's default weights,
    each loaded into the architecture the entry names (as open_clip loads a file)."""
    config = tmp_path / "vlbench-test-tiny.json"
    config.write_text(json.dumps(TINY), encoding="utf-8")
    repo = write_hub_repo(tmp_path / "repo", tiny_state(5))
    name = "tinyclip-from-openai-epoch-40.pt"
    torch.save(tiny_state(9), repo / name)
    sha = loopback_hub.commit_folder("model", "org/trove", repo)
    spec = {"name": "vlbench-test-tiny", "model_config": str(config)}
    model = load_model(spec | {"pretrained": f"hf-hub:org/trove/{name}", "revision": sha}, CPU)
    assert (model.source["repo"], model.source["revision"], model.source["file"]) == (
        "org/trove",
        sha,
        name,
    )
    assert loopback_hub.served("GET", f"/org/trove/resolve/{sha}/{name}")
    local = load_model(spec | {"pretrained": str(repo / name)}, CPU)
    pixels = local.preprocess(random_image(3)).unsqueeze(0)
    np.testing.assert_array_equal(model.encode_images(pixels), local.encode_images(pixels))
    assert hub_pins(spec | {"pretrained": f"hf-hub:org/trove/{name}"}) == [
        ("revision", "org/trove", "model")
    ]
    with pytest.raises(VlbenchError, match=re.escape("'hf-hub:org/repo/file.pt'")):
        hub_pins(spec | {"pretrained": "hf-hub:org/trove"})


@pytest.mark.parametrize("revision", [None, "main", "abc123"])
def test_hf_hub_name_refuses_an_unpinned_revision(revision) -> None:
    spec = {"name": "hf-hub:org/tiny"} | ({"revision": revision} if revision else {})
    with pytest.raises(VlbenchError, match="revision"):
        load_model(spec, CPU)


def test_custom_config_with_local_checkpoint(tmp_path: Path) -> None:
    config = tmp_path / "vlbench-test-tiny.json"
    config.write_text(json.dumps(TINY), encoding="utf-8")
    checkpoint = tmp_path / "weights.pt"
    write_random_checkpoint("vlbench-test-tiny", config, 7, checkpoint)
    spec = {"name": "vlbench-test-tiny", "model_config": str(config), "pretrained": str(checkpoint)}
    model = load_model(spec, CPU)
    saved = torch.load(checkpoint, weights_only=True)
    torch.testing.assert_close(model.model.state_dict()["visual.proj"], saved["visual.proj"])
    assert weights_files(spec) == [checkpoint]
    record = model_provenance(model, batch_size=8)
    assert record["weights"][0]["sha256"] == hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    assert record["batch_size"] == 8 and record["precision"] == "fp32" and record["device"] == "cpu"
    assert record["versions"]["open_clip_torch"] and record["versions"]["torch"]


def test_random_checkpoint_bytes_depend_on_the_seed_only(tmp_path: Path) -> None:
    """The same seed writes the same file wherever it is written (the archive's entry names do
    not come from the atomic writer's temporary name); another seed writes another file."""
    config = tmp_path / "vlbench-test-tiny.json"
    config.write_text(json.dumps(TINY), encoding="utf-8")
    first, second, other = tmp_path / "a.pt", tmp_path / "b" / "tiny.pt", tmp_path / "c.pt"
    second.parent.mkdir()
    write_random_checkpoint("vlbench-test-tiny", config, 7, first)
    write_random_checkpoint("vlbench-test-tiny", config, 7, second)
    write_random_checkpoint("vlbench-test-tiny", config, 8, other)
    assert first.read_bytes() == second.read_bytes()
    assert first.read_bytes() != other.read_bytes()


def test_missing_checkpoint_is_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(VlbenchError, match="checkpoint file not found"):
        load_model({"name": "ViT-B-32", "pretrained": str(tmp_path / "nope.pt")}, CPU)


@pytest.mark.parametrize(
    ("name", "tag", "fix"),
    [
        ("ViT-B-16", "openai", "ViT-B-16-quickgelu"),
        ("ViT-L-14", "openai", "ViT-L-14-quickgelu"),
        ("ViT-H-14-378", "dfn5b", "ViT-H-14-378-quickgelu"),
    ],
)
def test_quickgelu_weights_under_a_plain_name_are_refused(name: str, tag: str, fix: str) -> None:
    with pytest.raises(VlbenchError, match=f"QuickGELU.*use name '{fix}'") as error:
        load_model({"name": name, "pretrained": tag}, CPU)
    assert "\n" not in str(error.value)


def test_quickgelu_names_pass_the_guard_and_then_need_a_pin() -> None:
    with pytest.raises(
        VlbenchError, match=re.escape("timm/vit_large_patch14_clip_224.openai is not pinned")
    ):
        load_model({"name": "ViT-L-14-quickgelu", "pretrained": "openai"}, CPU)


def test_registry_knows_openai_checkpoint_hashes_as_quickgelu() -> None:
    # the sha256 open_clip's registry URL embeds for OpenAI ViT-B/16
    sha = "5806e77cd80f8b59890b7e101eabd078d9fb84e6937f9e85e4ecb61988df416f"
    assert quickgelu_module.known_weight_hashes()[sha] is True


def test_local_quickgelu_checkpoint_recognised_by_hash(tmp_path: Path, monkeypatch) -> None:
    config = tmp_path / "vlbench-test-plain.json"
    config.write_text(json.dumps(TINY), encoding="utf-8")
    checkpoint = tmp_path / "weights.pt"
    write_random_checkpoint("vlbench-test-plain", config, 0, checkpoint)
    digest = hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    monkeypatch.setattr(quickgelu_module, "known_weight_hashes", lambda: {digest[:10]: True})
    spec = {
        "name": "vlbench-test-plain",
        "model_config": str(config),
        "pretrained": str(checkpoint),
    }
    with pytest.raises(VlbenchError, match="trained with QuickGELU"):
        load_model(spec, CPU)


def test_local_checkpoint_beside_a_quickgelu_hub_config_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_hub_repo(repo, tiny_state(0))
    config = json.loads((repo / "open_clip_config.json").read_text())
    config["model_cfg"]["quick_gelu"] = True
    (repo / "open_clip_config.json").write_text(json.dumps(config))
    model_config = tmp_path / "vlbench-test-plain2.json"
    model_config.write_text(json.dumps(TINY), encoding="utf-8")
    spec = {
        "name": "vlbench-test-plain2",
        "model_config": str(model_config),
        "pretrained": str(repo / "open_clip_pytorch_model.bin"),
    }
    with pytest.raises(VlbenchError, match="trained with QuickGELU"):
        load_model(spec, CPU)


def test_context_length_override_must_fit_the_text_tower(tmp_path: Path) -> None:
    repo = write_hub_repo(tmp_path / "repo", tiny_state(0))
    with pytest.raises(VlbenchError, match="context_length 8 differs from the 12"):
        load_model({"name": f"local-dir:{repo}", "context_length": 8}, CPU)
    model = load_model({"name": f"local-dir:{repo}", "context_length": 12}, CPU)
    assert model.tokenizer(["one two"]).shape == (1, 12)


def test_precision_bf16_autocast_on_cpu_and_fp16_refused(tmp_path: Path) -> None:
    repo = write_hub_repo(tmp_path / "repo", tiny_state(0))
    with pytest.raises(VlbenchError, match="fp16 needs a GPU"):
        load_model({"name": f"local-dir:{repo}", "precision": "fp16"}, CPU)
    bf16 = load_model({"name": f"local-dir:{repo}", "precision": "bf16"}, CPU)
    fp32 = load_model({"name": f"local-dir:{repo}"}, CPU)
    pixels = fp32.preprocess(random_image(1)).unsqueeze(0)
    low, full = bf16.encode_images(pixels), fp32.encode_images(pixels)
    assert low.dtype == np.float32
    assert float((low @ full.T)[0, 0]) > 0.98  # same model, lower precision


def test_unknown_adapter_is_refused() -> None:
    with pytest.raises(VlbenchError, match="adapter must be one of"):
        load_model({"name": "x", "adapter": "nope"}, CPU)


def test_a_load_error_in_the_embedding_job_names_the_config_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vlbench.embedding.settings import EmbedSettings
    from vlbench.embedding.waves import load

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    repo = write_hub_repo(tmp_path / "repo", tiny_state(0))
    spec = {"name": f"local-dir:{repo}", "precision": "fp16"}
    with pytest.raises(VlbenchError) as info:
        load("my-half-model", spec, {}, EmbedSettings.from_config(batch_size=4))
    assert str(info.value).startswith("models.my-half-model: model ")
    assert "fp16 needs a GPU" in str(info.value)
