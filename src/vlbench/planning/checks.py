"""Helpers shared by the Snakemake rule files and the thin rule scripts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vlbench.config import source_kind
from vlbench.data.sources.spec import missing_source_files, named_source_paths
from vlbench.embedding.models import hub_pins, local_paths, looks_like_path
from vlbench.errors import VlbenchError
from vlbench.paths import random_checkpoint
from vlbench.planning.fingerprints import fingerprint


def model_spec_for_job(model_key: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec an embedding job loads: random-init models load their rule-made checkpoint."""
    resolved = {key: value for key, value in spec.items() if key != "random_init_seed"}
    if "random_init_seed" in spec:
        resolved["pretrained"] = random_checkpoint(model_key)
    return resolved


def local_checkpoint(model_key: str, spec: Mapping[str, Any]) -> list[str]:
    """The local weights file a model depends on, as a Snakemake input list.

    A user-supplied file that does not exist is left out, so a dry run still plans; the
    embedding job then fails naming it (see `missing_local_paths`).
    """
    pretrained = model_spec_for_job(model_key, spec).get("pretrained")
    if not pretrained or not looks_like_path(pretrained):
        return []
    if "random_init_seed" in spec or Path(pretrained).is_file():
        return [pretrained]
    return []


def source_files(source: Mapping[str, Any]) -> list[str]:
    """The user-supplied folder and files a benchmark source is read from (none for hub sources).

    The source folder, every annotation file named (hashed by content when small), and any
    image folder or archive named outside the folder.
    """
    if source_kind(source) != "path":
        return []
    root = os.path.normpath(source["path"])
    paths = [root]
    for field, path in named_source_paths(source):
        inside = os.path.commonpath([os.path.abspath(root), os.path.abspath(path)]) == (
            os.path.abspath(root)
        )
        if field == "annotations" or not inside:
            paths.append(path)
    return paths


def source_fingerprint(source: Mapping[str, Any]) -> str:
    """Fingerprint of every user-supplied file of a benchmark source ("" for hub sources)."""
    return fingerprint(source_files(source))


def model_fingerprint(spec: Mapping[str, Any]) -> str:
    """Fingerprint of every user-supplied file a model reads: model_config, local weights,
    local hub-layout folders ("" when it reads none; workflow-made checkpoints are left out,
    Snakemake tracks those as rule outputs)."""
    return fingerprint(value for _, value, _ in local_paths(spec))


def check_model_keys(config: Mapping[str, Any]) -> None:
    """Reject model entries whose keys contradict each other, or that name an open_clip
    pretrained tag open_clip does not list (from the static tag table: no model library is
    imported)."""
    for key, spec in config["models"].items():
        try:
            hub_pins(spec)
        except VlbenchError as error:
            raise VlbenchError(f"models.{key}: {error}") from None
        if "random_init_seed" in spec and "pretrained" in spec:
            raise VlbenchError(
                f"models.{key}: give either 'pretrained' or 'random_init_seed', not both"
            )
        if "random_init_seed" in spec and "model_config" not in spec:
            raise VlbenchError(f"models.{key}: 'random_init_seed' needs a 'model_config'")


def missing_local_paths(config: Mapping[str, Any]) -> list[str]:
    """One line per local file or directory named in the config that does not exist."""
    missing = []
    for key, spec in config["models"].items():
        for field, value, is_dir in local_paths(spec):
            if not (Path(value).is_dir() if is_dir else Path(value).is_file()):
                kind = "directory" if is_dir else "file"
                missing.append(f"models.{key}.{field}: {kind} not found: {value}")
    for key, spec in config["benchmarks"].items():
        source = spec["source"]
        if source_kind(source) == "path" and not Path(source["path"]).is_dir():
            missing.append(f"benchmarks.{key}.source.path: directory not found: {source['path']}")
    return missing + missing_source_files(config)


def gpu_visible() -> bool:
    """Whether this machine shows the run an NVIDIA GPU (a device file and CUDA_VISIBLE_DEVICES
    not empty), asked without importing torch."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "NoDevFiles"):
        return False
    return any(Path("/dev").glob("nvidia[0-9]*"))


def check_precisions_here(config: Mapping[str, Any], models: list[str]) -> None:
    """Before any job of a run on this machine: refuse fp16 for a model when no GPU is visible
    (the embedding job would stop on it, after the jobs before it ran)."""
    wants_fp16 = [key for key in models if config["models"][key].get("precision") == "fp16"]
    if wants_fp16 and not gpu_visible():
        raise VlbenchError(
            f"models.{wants_fp16[0]}.precision: fp16 needs a GPU and this run's machine shows "
            "none (no /dev/nvidia* device, or CUDA_VISIBLE_DEVICES empty); use fp32 or bf16 "
            "on the CPU, or run the embedding jobs on a GPU node"
        )
