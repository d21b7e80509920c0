"""One entry point for every adapter: load a model, list its weight files and hub pins."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vlbench.errors import VlbenchError
from vlbench.models import hub
from vlbench.models.hub import looks_like_path

if TYPE_CHECKING:
    import torch

    from vlbench.models.base import EmbeddingModel

ADAPTERS = ("open_clip", "pmc_clip", "hf_clip")


def adapter_of(spec: Mapping[str, Any]) -> str:
    """The spec's adapter (default open_clip), validated."""
    adapter = spec.get("adapter", "open_clip")
    if adapter not in ADAPTERS:
        raise VlbenchError(
            f"model {spec.get('name')}: adapter must be one of {', '.join(ADAPTERS)}, "
            f"not {adapter!r}"
        )
    return adapter


def _loader(adapter: str) -> Callable[[Mapping[str, Any], torch.device | None], EmbeddingModel]:
    if adapter == "pmc_clip":
        from vlbench.models.pmc_clip import load_pmc_clip

        return load_pmc_clip
    if adapter == "hf_clip":
        from vlbench.models.hf_clip import load_hf_clip

        return load_hf_clip
    from vlbench.models.open_clip_adapter import load_open_clip

    return load_open_clip


def load_model(spec: Mapping[str, Any], device: torch.device | None = None) -> EmbeddingModel:
    """Load the model a config entry describes, through its adapter."""
    return _loader(adapter_of(spec))(spec, device)


def weights_files(spec: Mapping[str, Any]) -> list[Path]:
    """The weight files a spec loads (downloading pinned hub files into the cache if needed)."""
    adapter = adapter_of(spec)
    if adapter == "pmc_clip":
        from vlbench.models.pmc_clip import resolve_weights

        return resolve_weights(spec)[0]
    if adapter == "hf_clip":
        from vlbench.models.hf_clip import resolve_hf_dir, weight_files

        return weight_files(resolve_hf_dir(spec)[0])
    from vlbench.models.open_clip_adapter import resolve_open_clip

    return [resolve_open_clip(spec).checkpoint]


def hub_pins(spec: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(spec key, hub repo, repo type) for every hub download the spec makes that needs a pin."""
    adapter = adapter_of(spec)
    name = spec.get("name", "")
    schema, identifier = hub.split_schema(name) if name else (None, name)
    if adapter == "pmc_clip":
        pins = []
        pretrained = spec.get("pretrained", "")
        if pretrained.startswith(hub.HF_HUB_PREFIX):
            repo = pretrained.removeprefix(hub.HF_HUB_PREFIX)
            pins.append(("revision", repo, spec.get("repo_type", "dataset")))
        from vlbench.models.pmc_clip import TEXT_MODEL

        text_model = spec.get("text_model", TEXT_MODEL)
        if not text_model.startswith(hub.LOCAL_DIR_PREFIX) and not Path(text_model).is_dir():
            pins.append(
                ("text_model_revision", text_model.removeprefix(hub.HF_HUB_PREFIX), "model")
            )
        return pins
    if schema == "hf-hub":
        return [("revision", identifier, "model")]
    if adapter == "open_clip" and schema is None and spec.get("pretrained"):
        if looks_like_path(spec["pretrained"]):
            return []  # a local checkpoint: decided without importing open_clip (and torch)
        from open_clip.pretrained import get_pretrained_cfg

        cfg = get_pretrained_cfg(name, spec["pretrained"])
        if "mlfoundations" in cfg.get("url", "") or not cfg.get("hf_hub"):
            return []
        return [("revision", os.path.split(cfg["hf_hub"])[0], "model")]
    return []


def unpinned(spec: Mapping[str, Any]) -> list[str]:
    """One line per hub download of the spec that has no commit pinned yet."""
    return [
        f"'{key}' not set: {repo_type} {repo} is not pinned to a commit"
        for key, repo, repo_type in hub_pins(spec)
        if not spec.get(key)
    ]


def local_paths(spec: Mapping[str, Any]) -> list[tuple[str, str, bool]]:
    """(spec key, path, is a directory) for every local file or folder the spec reads."""
    adapter = adapter_of(spec)
    paths: list[tuple[str, str, bool]] = []
    name = spec.get("name", "")
    if name.startswith(hub.LOCAL_DIR_PREFIX):
        paths.append(("name", name.removeprefix(hub.LOCAL_DIR_PREFIX), True))
    if spec.get("model_config"):
        paths.append(("model_config", spec["model_config"], False))
    pretrained = spec.get("pretrained", "")
    if pretrained.startswith(hub.LOCAL_DIR_PREFIX):
        paths.append(("pretrained", pretrained.removeprefix(hub.LOCAL_DIR_PREFIX), True))
    elif pretrained and looks_like_path(pretrained):
        is_dir = adapter == "pmc_clip" and not Path(pretrained).suffix
        paths.append(("pretrained", pretrained, is_dir))
    text_model = spec.get("text_model", "")
    if text_model.startswith(hub.LOCAL_DIR_PREFIX):
        paths.append(("text_model", text_model.removeprefix(hub.LOCAL_DIR_PREFIX), True))
    return paths
