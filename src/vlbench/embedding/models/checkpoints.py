"""Reading weight files safely: sha256, key listing without loading, `weights_only` loads."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from vlbench.errors import VlbenchError

# What a file torch.save wrote starts with: a zip archive (since torch 1.6) or a pickle.
TORCH_MAGIC = (b"PK\x03\x04", b"\x80")
SHOWN_KEYS = 3


def check_torch_file(path: str | Path) -> None:
    """Refuse a file that torch.save cannot have written (text, HTML, an empty download)."""
    with open(path, "rb") as handle:
        head = handle.read(16)
    if not head:
        raise VlbenchError(f"{path}: the checkpoint file is empty")
    if not head.startswith(TORCH_MAGIC):
        raise VlbenchError(
            f"{path}: not a PyTorch checkpoint (neither the zip archive nor the pickle torch.save "
            f"writes; it starts with {head!r}); give a .pt/.pth file or .safetensors"
        )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def torch_load(path: str | Path) -> Any:
    """`torch.load(weights_only=True)` onto the CPU, with a one-line error."""
    check_torch_file(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise VlbenchError(
            f"{path}: cannot be read as plain tensors with weights_only=True ({_first_line(exc)})"
        ) from exc


def _listed(kind: str, keys: list[str]) -> str:
    more = f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
    return f"{len(keys)} {kind} key(s): {', '.join(keys[:SHOWN_KEYS])}{more}"


def state_dict_mismatch(error: BaseException) -> str:
    """PyTorch's multi-line `load_state_dict` error in one line: the first missing and
    unexpected keys and the first shape mismatch, with their counts."""
    text = str(error)
    parts = []
    for kind, label in (("Missing", "missing"), ("Unexpected", "unexpected")):
        found = re.search(rf"{kind} key\(s\) in state_dict: (.*)", text)
        if found:
            parts.append(_listed(label, re.findall(r'"([^"]+)"', found.group(1))))
    shapes = re.findall(
        r"size mismatch for (\S+): copying a param with shape torch\.Size\(\[(.*?)\]\) from "
        r"checkpoint, the shape in current model is torch\.Size\(\[(.*?)\]\)",
        text,
    )
    if shapes:
        name, stored, wanted = shapes[0]
        more = f" and {len(shapes) - 1} more" if len(shapes) > 1 else ""
        parts.append(
            f"{len(shapes)} shape mismatch(es): {name} is [{stored}] in the checkpoint, "
            f"[{wanted}] in the model{more}"
        )
    return "; ".join(parts) or _first_line(error)


def load_strict(
    module: torch.nn.Module, state: dict[str, torch.Tensor], refusal: str, assign: bool = False
) -> None:
    """Load `state` into `module` strictly; a mismatch is one line, `refusal` then the keys."""
    try:
        module.load_state_dict(state, strict=True, assign=assign)
    except RuntimeError as exc:
        raise VlbenchError(f"{refusal} ({state_dict_mismatch(exc)})") from exc


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
        check_torch_file(path)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # legacy (non-zip) format cannot be memory-mapped
            state = torch_load(path)
        except Exception as exc:
            raise VlbenchError(
                f"{path}: cannot be read as plain tensors with weights_only=True "
                f"({_first_line(exc)})"
            ) from exc
        if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
            state = state["state_dict"]
        keys = set(state) if isinstance(state, dict) else set()
    return {key.removeprefix("module.") for key in keys}
