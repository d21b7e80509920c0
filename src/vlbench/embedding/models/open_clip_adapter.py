"""open_clip models: built-in names with tags, `hf-hub:` repos pinned to a commit, `local-dir:`
hub-layout folders, local checkpoint files and custom architecture JSONs."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vlbench.atomic import atomic_path
from vlbench.embedding.models import hub, quickgelu
from vlbench.embedding.models.base import EmbeddingModel, check_precision, pick_device
from vlbench.embedding.models.causal_text import padding_trimmed_text_encoder
from vlbench.embedding.models.checkpoints import (
    check_torch_file,
    checkpoint_keys,
    load_strict,
    read_state_dict,
    state_dict_mismatch,
)
from vlbench.embedding.models.hub import looks_like_path
from vlbench.embedding.models.open_clip_tags import check_activation
from vlbench.embedding.models.projections import (
    DEFAULT_IMAGE_PROJECTION,
    check_choice,
    has_two_projections,
    select_image_projection,
)
from vlbench.embedding.models.transforms import build_image_transform, describe_open_clip
from vlbench.errors import VlbenchError
from vlbench.hashing import weights_sha256

CONFIG_NAME = "open_clip_config.json"
# Weight file names in an open_clip hub repository, most preferred first (as open_clip does).
WEIGHT_NAMES = (
    "open_clip_model.safetensors",
    "open_clip_pytorch_model.safetensors",
    "open_clip_pytorch_model.bin",
    "open_clip_pytorch_model.pth",
    "model.safetensors",
    "pytorch_model.bin",
    "pytorch_model.pth",
    "model.pth",
)
# What a pinned snapshot of an open_clip hub repository needs besides the weights.
REPO_SMALL_FILES = [CONFIG_NAME, "*.txt", "tokenizer*", "special_tokens_map.json", "*.model"]
PREPROCESS_KEYS = ("mean", "std", "interpolation", "resize_mode", "fill_color")


def register_model_config(name: str, model_config: str | Path) -> None:
    """Make a custom open_clip architecture JSON loadable under `name` (the file's stem)."""
    import open_clip

    path = Path(model_config)
    if not path.is_file():
        raise VlbenchError(f"model_config file not found: {path}")
    if path.stem != name:
        raise VlbenchError(
            f"model_config {path}: open_clip registers it as '{path.stem}', "
            f"so the model name must be '{path.stem}', not '{name}'"
        )
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise VlbenchError(f"model_config {path}: not valid JSON ({exc})") from exc
    open_clip.add_model_config(path)


@dataclass
class OpenClipSource:
    """Where an open_clip model's architecture and weights come from, resolved to files."""

    create_name: str
    checkpoint: Path
    model_cfg: dict[str, Any]
    preprocess_override: dict[str, Any] | None = None
    record: dict[str, Any] = field(default_factory=dict)


def find_repo_checkpoint(directory: Path) -> Path:
    """The weights file of a hub-layout folder, by open_clip's order of preference."""
    for name in WEIGHT_NAMES:
        if (directory / name).is_file():
            return directory / name
    raise VlbenchError(
        f"{directory}: no weights file (expected one of {', '.join(WEIGHT_NAMES[:3])})"
    )


def read_repo_config(directory: Path) -> dict[str, Any]:
    """The `model_cfg` of a hub-layout folder's open_clip_config.json."""
    path = directory / CONFIG_NAME
    if not path.is_file():
        raise VlbenchError(f"{directory}: no {CONFIG_NAME}, so not an open_clip hub layout")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise VlbenchError(f"{path}: not valid JSON ({exc})") from exc
    if "model_cfg" not in config:
        raise VlbenchError(f"{path}: missing 'model_cfg'")
    return config["model_cfg"]


def _pinned_repo_snapshot(label: str, repo: str, revision: str | None) -> Path:
    """A local copy of an open_clip hub repository at a pinned commit."""
    revision = hub.require_revision(label, repo, revision)
    directory = hub.snapshot(repo, revision, allow_patterns=REPO_SMALL_FILES)
    for name in WEIGHT_NAMES[:3]:
        if (directory / name).is_file():
            return directory
    last_error: VlbenchError | None = None
    for name in WEIGHT_NAMES[:3]:
        try:
            return hub.hub_file(repo, name, revision).parent
        except VlbenchError as error:
            last_error = error
    assert last_error is not None
    raise last_error


def _tag_checkpoint(
    label: str, tag: str, tag_cfg: Mapping[str, Any], revision: str | None
) -> tuple[Path, dict[str, Any]]:
    """Download a registry tag's weights, pinned by a hub commit or by the sha256 in its URL.

    OpenAI's own URLs serve TorchScript archives, which `weights_only=True` refuses, so those
    tags load the open_clip-format copy from their hub repository instead.
    """
    hf_hub = tag_cfg.get("hf_hub", "")
    url = tag_cfg.get("url", "")
    if not revision and "mlfoundations" in url and quickgelu._hash_in_url(url):
        from open_clip.pretrained import download_pretrained_from_url

        try:
            path = Path(download_pretrained_from_url(url))
        except Exception as exc:
            raise VlbenchError(f"model {label}: download of {url} failed ({exc})") from exc
        return path, {"url": url, "pinned_by": "sha256 in the URL, checked by open_clip"}
    if not hf_hub:
        raise VlbenchError(
            f"model {label}: pretrained '{tag}' has neither a hub repository nor a checksummed URL"
        )
    repo, filename = os.path.split(hf_hub)
    revision = hub.require_revision(label, repo, revision)
    last_error: VlbenchError | None = None
    for name in [filename] if filename else WEIGHT_NAMES[:3]:
        try:
            path = hub.hub_file(repo, name, revision)
            return path, {"repo": repo, "revision": revision, "file": name}
        except VlbenchError as error:
            last_error = error
    assert last_error is not None
    raise last_error


def resolve_open_clip(spec: Mapping[str, Any]) -> OpenClipSource:
    """Resolve a spec to an architecture name, a weights file and a provenance record.

    Downloads (into the Hugging Face cache) only at pinned commits.
    """
    import open_clip

    name = spec["name"]
    if spec.get("model_config"):
        register_model_config(name, spec["model_config"])
    schema, identifier = hub.split_schema(name)
    record: dict[str, Any] = {"adapter": "open_clip", "name": name}
    if schema is not None:
        if spec.get("pretrained"):
            raise VlbenchError(
                f"model {name}: '{schema}:' models carry their own weights; drop 'pretrained'"
            )
        if schema == "hf-hub":
            directory = _pinned_repo_snapshot(name, identifier, spec.get("revision"))
            record.update(repo=identifier, revision=spec["revision"])
        else:
            directory = Path(identifier)
            if not directory.is_dir():
                raise VlbenchError(f"model {name}: directory not found: {directory}")
        checkpoint = find_repo_checkpoint(directory)
        return OpenClipSource(
            f"{hub.LOCAL_DIR_PREFIX}{directory}",
            checkpoint,
            read_repo_config(directory),
            None,
            record,
        )

    model_cfg = open_clip.get_model_config(name)
    if model_cfg is None:
        raise VlbenchError(
            f"model {name}: not an open_clip architecture (see open_clip.list_models(), or give "
            "'model_config')"
        )
    pretrained = spec.get("pretrained")
    if not pretrained:
        raise VlbenchError(f"model {name}: no weights; give 'pretrained' (a tag or a file)")
    record["pretrained"] = pretrained
    hub_file = hub.split_hub_file(pretrained)
    if hub_file:
        # A weights file inside a hub repository (BioTrove-CLIP's three checkpoints): the
        # architecture is `name`, the transform its default, as open_clip builds them for a file.
        repo, filename = hub_file
        revision = hub.require_revision(name, repo, spec.get("revision"))
        checkpoint = hub.hub_file(repo, filename, revision)
        record.update(repo=repo, revision=revision, file=filename)
        return OpenClipSource(name, checkpoint, model_cfg, None, record)
    if looks_like_path(pretrained):
        checkpoint = Path(pretrained)
        if not checkpoint.is_file():
            raise VlbenchError(f"model {name}: checkpoint file not found: {pretrained}")
        quickgelu.check_local_checkpoint(name, model_cfg, checkpoint, weights_sha256(checkpoint))
        return OpenClipSource(name, checkpoint, model_cfg, None, record)

    from open_clip.pretrained import get_pretrained_cfg, list_pretrained_tags_by_model

    tag_cfg = get_pretrained_cfg(name, pretrained)
    if not tag_cfg:
        tags = ", ".join(list_pretrained_tags_by_model(name)) or "none"
        raise VlbenchError(
            f"model {name}: unknown pretrained tag '{pretrained}' (open_clip tags: {tags})"
        )
    check_activation(name, pretrained)  # the static table, tested equal to the registry
    checkpoint, where = _tag_checkpoint(name, pretrained, tag_cfg, spec.get("revision"))
    record.update(where)
    preprocess = {key: tag_cfg[key] for key in PREPROCESS_KEYS if key in tag_cfg}
    return OpenClipSource(name, checkpoint, model_cfg, preprocess, record)


def _load_weights(
    model: torch.nn.Module, source: OpenClipSource, projection: str, label: str
) -> None:
    """Load the checkpoint strictly; two-projection checkpoints load the chosen projection."""
    from open_clip.factory import load_checkpoint

    if source.checkpoint.suffix != ".npz" and has_two_projections(
        checkpoint_keys(source.checkpoint)
    ):
        state = select_image_projection(read_state_dict(source.checkpoint), projection, label)
        state.pop("text.transformer.embeddings.position_ids", None)
        refusal = f"model {label}: {source.checkpoint} does not fit the architecture"
        load_strict(model, state, refusal)
        source.record["image_projection"] = projection
        return
    if projection != DEFAULT_IMAGE_PROJECTION:
        select_image_projection({}, projection, label)  # raises: only one projection here
    if source.checkpoint.suffix not in (".npz", ".safetensors"):
        check_torch_file(source.checkpoint)
    try:
        load_checkpoint(model, str(source.checkpoint), strict=True, weights_only=True)
    except Exception as exc:
        raise VlbenchError(
            f"model {label}: {source.checkpoint} does not fit the architecture "
            f"({state_dict_mismatch(exc)})"
        ) from exc


def _check_context_length(model: torch.nn.Module, override: int | None, label: str) -> None:
    """Built-in text towers take exactly their trained length; HF towers up to their positions."""
    if not override:
        return
    text = getattr(model, "text", None)
    hf_config = getattr(getattr(text, "transformer", None), "config", None)
    if hf_config is not None:
        limit = int(getattr(hf_config, "max_position_embeddings", override))
        if override > limit:
            raise VlbenchError(
                f"model {label}: context_length {override} exceeds the text model's {limit} "
                "positions"
            )
        return
    trained = getattr(model, "context_length", None) or getattr(text, "context_length", None)
    if trained and override != int(trained):
        raise VlbenchError(
            f"model {label}: context_length {override} differs from the {trained} tokens this "
            "text tower was trained with and takes"
        )


class _DropRandomInitWarning(logging.Filter):
    """open_clip warns 'initialized randomly' when asked not to load weights; we load them next."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "initialized randomly" not in record.getMessage()


@contextlib.contextmanager
def _quiet_random_init_warning() -> Iterator[None]:
    root = logging.getLogger()
    log_filter = _DropRandomInitWarning()
    root.addFilter(log_filter)
    try:
        yield
    finally:
        root.removeFilter(log_filter)


def load_open_clip(spec: Mapping[str, Any], device: torch.device | None = None) -> EmbeddingModel:
    """Build an open_clip model from a spec and load its pinned weights strictly."""
    import open_clip

    name = spec["name"]
    precision = spec.get("precision", "fp32")
    device = device or pick_device()
    check_precision(name, precision, device)
    projection = check_choice(name, spec.get("image_projection", DEFAULT_IMAGE_PROJECTION))
    source = resolve_open_clip(spec)
    try:
        with _quiet_random_init_warning():
            model = open_clip.create_model(
                source.create_name,
                pretrained=None,
                load_weights=False,
                device="cpu",
                force_preprocess_cfg=source.preprocess_override,
                pretrained_image=False,
                pretrained_text=False,
            )
    except (RuntimeError, ValueError, FileNotFoundError, OSError) as exc:
        raise VlbenchError(f"model {name}: cannot build ({str(exc).splitlines()[0]})") from exc
    _load_weights(model, source, projection, name)
    model.to(device).eval()

    override = spec.get("context_length")
    _check_context_length(model, override, name)
    tokenizer = open_clip.get_tokenizer(source.create_name, context_length=override)
    preprocess_cfg = open_clip.get_model_preprocess_cfg(model)
    image_transform = describe_open_clip(preprocess_cfg)
    preprocess = build_image_transform(image_transform)
    source.record["context_length"] = tokenizer.context_length
    return EmbeddingModel(
        model=model,
        preprocess=preprocess,
        tokenizer=tokenizer,
        device=device,
        precision=precision,
        image_transform=image_transform,
        context_length=tokenizer.context_length,
        weights=[source.checkpoint],
        source=source.record,
        padding_trimmed_text_encoder=padding_trimmed_text_encoder(model),
    )


def write_random_checkpoint(
    name: str, model_config: str | Path, seed: int, out_path: str | Path
) -> None:
    """Save seeded random weights of a custom architecture as an open_clip state-dict checkpoint."""
    import open_clip

    register_model_config(name, model_config)
    torch.manual_seed(seed)
    model = open_clip.create_model(name, pretrained=None, device="cpu")
    # Through a file object, so the archive's entries have torch's fixed prefix ("archive/"),
    # not the temporary file's random name: the same seed writes the same bytes.
    with atomic_path(out_path) as tmp, open(tmp, "wb") as file:
        torch.save(model.state_dict(), file)


def weights_files(spec: Mapping[str, Any]) -> list[Path]:
    """The checkpoint an open_clip spec loads."""
    return [resolve_open_clip(spec).checkpoint]
