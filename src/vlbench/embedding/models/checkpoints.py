"""Reading weight files safely: sha256, key listing without loading, `weights_only` loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vlbench.errors import VlbenchError


def torch_load(path: str | Path) -> Any:
    """`torch.load(weights_only=True)` onto the CPU, with a one-line error."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise VlbenchError(
            f"{path}: cannot be read as plain tensors with weights_only=True ({first_line})"
        ) from exc


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """A checkpoint's state dict: safetensors or torch file, `state_dict` entry unwrapped,
    DistributedDataParallel `module.` prefixes removed."""
    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(path), device="cpu")
    else:
        state = torch_load(path)
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not state:
        raise VlbenchError(f"{path}: no state dict of tensors found")
    if all(key.startswith("module.") for key in state):
        state = {key.removeprefix("module."): value for key, value in state.items()}
    return state


def checkpoint_keys(path: str | Path) -> set[str]:
    """The tensor names in a checkpoint, read lazily (safetensors header or memory map)."""
    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            keys = set(handle.keys())
    else:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # legacy (non-zip) format cannot be memory-mapped
            state = torch_load(path)
        except Exception as exc:
            raise VlbenchError(
                f"{path}: cannot be read as plain tensors with weights_only=True ({exc})"
            ) from exc
        if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
            state = state["state_dict"]
        keys = set(state) if isinstance(state, dict) else set()
    return {key.removeprefix("module.") for key in keys}
