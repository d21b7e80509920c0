"""Helpers shared by the Snakemake rule files and the thin rule scripts."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from vlbench.config import source_kind
from vlbench.errors import VlbenchError
from vlbench.models import looks_like_path


def random_checkpoint_path(model_key: str) -> str:
    """Where the rule that writes seeded random weights puts a model's checkpoint."""
    return f"results/checkpoints/{model_key}.pt"


def model_spec_for_job(model_key: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec an embedding job loads: random-init models load their rule-made checkpoint."""
    resolved = {key: value for key, value in spec.items() if key != "random_init_seed"}
    if "random_init_seed" in spec:
        resolved["pretrained"] = random_checkpoint_path(model_key)
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


def check_model_keys(config: Mapping[str, Any]) -> None:
    """Reject model entries whose keys contradict each other."""
    for key, spec in config["models"].items():
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
        for field in ("model_config", "pretrained"):
            value = spec.get(field)
            is_path = value and (field == "model_config" or looks_like_path(value))
            if is_path and not Path(value).is_file():
                missing.append(f"models.{key}.{field}: file not found: {value}")
    for key, spec in config["benchmarks"].items():
        source = spec["source"]
        if source_kind(source) == "path" and not Path(source["path"]).is_dir():
            missing.append(f"benchmarks.{key}.source.path: directory not found: {source['path']}")
    return missing


def require_path(path: str | Path, what: str, directory: bool = False) -> Path:
    """Fail with a one-line error naming `what` when a local path is missing."""
    path = Path(path)
    if not (path.is_dir() if directory else path.is_file()):
        kind = "directory" if directory else "file"
        raise VlbenchError(f"{what}: {kind} not found: {path}")
    return path


@contextlib.contextmanager
def rule_log(log_path: str | Path) -> Iterator[logging.Logger]:
    """Send stderr (progress bars, warnings, tracebacks) and a logger to the rule's log file."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8", buffering=1) as handle:
        old_stderr = sys.stderr
        sys.stderr = handle
        logger = logging.getLogger("vlbench")
        log_handler = logging.StreamHandler(handle)
        log_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(log_handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        try:
            yield logger
        except VlbenchError as error:
            handle.write(f"ERROR: {error}\n")
            old_stderr.write(f"vlbench error: {error}\n")
            raise SystemExit(1) from None
        finally:
            logger.removeHandler(log_handler)
            sys.stderr = old_stderr
