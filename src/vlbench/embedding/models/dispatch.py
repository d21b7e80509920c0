"""One entry point for every adapter: load a model, list its weight files and hub pins."""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vlbench.embedding.models import hub
from vlbench.embedding.models.hub import PMC_CLIP_TEXT_MODEL, looks_like_path
from vlbench.embedding.models.open_clip_tags import check_activation, tag_hub_repo
from vlbench.errors import VlbenchError

if TYPE_CHECKING:
    import torch

    from vlbench.embedding.models.base import EmbeddingModel


def _hub_name_pins(spec: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """An `hf-hub:org/repo` model name is one pinned download."""
    name = spec.get("name", "")
    schema, identifier = hub.split_schema(name) if name else (None, name)
    return [("revision", identifier, "model")] if schema == "hf-hub" else []


def _open_clip_pins(spec: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """An hf-hub name, or the hub repository behind a pretrained tag (open_clip's registry)."""
    name, pretrained = spec.get("name", ""), spec.get("pretrained")
    if hub.split_schema(name)[0] is not None or not pretrained:
        return _hub_name_pins(spec)
    if looks_like_path(pretrained):
        return []  # a local checkpoint
    hub_file = hub.split_hub_file(pretrained)
    if hub_file:
        return [("revision", hub_file[0], "model")]  # a weights file inside a hub repository
    repo = tag_hub_repo(name, pretrained)  # a static table: planning never imports open_clip
    check_activation(name, pretrained)
    return [("revision", repo, "model")] if repo else []


def _pmc_clip_pins(spec: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """The weights repository (a dataset repository by default) and the BERT text model."""
    pins = []
    pretrained = spec.get("pretrained", "")
    if pretrained.startswith(hub.HF_HUB_PREFIX):
        repo = pretrained.removeprefix(hub.HF_HUB_PREFIX)
        pins.append(("revision", repo, spec.get("repo_type", "dataset")))
    text_model = spec.get("text_model", PMC_CLIP_TEXT_MODEL)
    if not text_model.startswith(hub.LOCAL_DIR_PREFIX) and not Path(text_model).is_dir():
        pins.append(("text_model_revision", text_model.removeprefix(hub.HF_HUB_PREFIX), "model"))
    return pins


@dataclass(frozen=True)
class Adapter:
    """How one family of models is loaded: its module (imported on first use, so planning
    never imports torch), the loader and weight lister in it, and its hub downloads."""

    module: str
    loader: str
    pins: Callable[[Mapping[str, Any]], list[tuple[str, str, str]]]
    # A `pretrained` path without a suffix names a folder of files (not one checkpoint).
    folder_weights: bool = False

    def function(self, name: str) -> Callable[..., Any]:
        """A function of the adapter's module."""
        return getattr(importlib.import_module(f"vlbench.embedding.models.{self.module}"), name)


# The adapter registry; the config schema's `adapter` enum lists the same names (a test checks).
ADAPTERS: dict[str, Adapter] = {
    "open_clip": Adapter("open_clip_adapter", "load_open_clip", _open_clip_pins),
    "pmc_clip": Adapter("pmc_clip", "load_pmc_clip", _pmc_clip_pins, folder_weights=True),
    "hf_clip": Adapter("hf_clip", "load_hf_clip", _hub_name_pins),
    "fg_clip": Adapter("fg_clip", "load_fg_clip", _hub_name_pins),
    "imagebind": Adapter("imagebind", "load_imagebind", lambda spec: []),
}
DEFAULT_ADAPTER = "open_clip"


def adapter_of(spec: Mapping[str, Any]) -> Adapter:
    """The spec's adapter (default open_clip), validated."""
    name = spec.get("adapter", DEFAULT_ADAPTER)
    if name not in ADAPTERS:
        raise VlbenchError(
            f"model {spec.get('name')}: adapter must be one of {', '.join(ADAPTERS)}, not {name!r}"
        )
    return ADAPTERS[name]


def import_ahead(modules: list[str], name: str = "imports-ahead") -> threading.Thread:
    """Start importing `modules` on a thread (join it before using them). An import that fails
    there fails again, with its message, where the module is next imported."""

    def run() -> None:
        for module in modules:
            with contextlib.suppress(Exception):
                importlib.import_module(module)

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def import_adapters_ahead(specs: Iterable[Mapping[str, Any]]) -> threading.Thread:
    """Start importing the modules of the specs' adapters (open_clip, transformers: seconds) on
    a thread (`import_ahead`), so that they load while the job plans and hashes its shards; join
    it before the first `load_model`."""
    modules = sorted({f"vlbench.embedding.models.{adapter_of(spec).module}" for spec in specs})
    return import_ahead(modules, "adapter-imports")


def load_model(spec: Mapping[str, Any], device: torch.device | None = None) -> EmbeddingModel:
    """Load the model a config entry describes, through its adapter."""
    adapter = adapter_of(spec)
    return adapter.function(adapter.loader)(spec, device)


def weights_files(spec: Mapping[str, Any]) -> list[Path]:
    """The weight files a spec loads (downloading pinned hub files into the cache if needed)."""
    return adapter_of(spec).function("weights_files")(spec)


# The spec keys that pin a hub download (one per download a spec can make).
PIN_KEYS = ("revision", "text_model_revision")


def hub_pins(spec: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(spec key, hub repo, repo type) for every hub download the spec makes that needs a pin.

    A pin key given for a download the spec does not make (a `revision` beside weights that
    come from a URL or a local file) is refused: it would pin nothing, silently."""
    pins = adapter_of(spec).pins(spec)
    used = {key for key, _, _ in pins}
    for key in PIN_KEYS:
        if spec.get(key) and key not in used:
            weights = spec.get("pretrained") or spec.get("name")
            raise VlbenchError(
                f"'{key}' pins a hub repository, but this model downloads nothing from the hub "
                f"that it would pin ({weights!r} comes from a checksummed URL or a local path); "
                f"drop '{key}'"
            )
    return pins


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
        is_dir = adapter.folder_weights and not Path(pretrained).suffix
        paths.append(("pretrained", pretrained, is_dir))
    text_model = spec.get("text_model", "")
    if text_model.startswith(hub.LOCAL_DIR_PREFIX):
        paths.append(("text_model", text_model.removeprefix(hub.LOCAL_DIR_PREFIX), True))
    elif text_model and Path(text_model).is_dir():  # a plain folder path, read as local too
        paths.append(("text_model", text_model, True))
    return paths
