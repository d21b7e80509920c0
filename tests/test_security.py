"""No pickle anywhere: every load of arrays and weights refuses executable payloads."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch
from workflow_helpers import REPO, TINY_MODEL_CONFIG

SOURCES = sorted([*(REPO / "src" / "vlbench").rglob("*.py"), *(REPO / "scripts").glob("*.py")])


def calls(path: Path) -> list[ast.Call]:
    return [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)]


def call_name(node: ast.Call) -> str:
    return ast.unparse(node.func)


def keyword(node: ast.Call, name: str) -> str | None:
    return next((ast.unparse(k.value) for k in node.keywords if k.arg == name), None)


def test_sources_were_found() -> None:
    assert len(SOURCES) > 20


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_pickle_module(path: Path) -> None:
    tree = ast.parse(path.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert not imported & {"pickle", "cPickle", "dill", "joblib", "cloudpickle"}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_array_and_weight_loads_refuse_pickle(path: Path) -> None:
    for node in calls(path):
        name = call_name(node)
        if name in {"np.load", "numpy.load"}:
            assert keyword(node, "allow_pickle") == "False", f"{path}: {ast.unparse(node)}"
        if name == "torch.load":
            assert keyword(node, "weights_only") == "True", f"{path}: {ast.unparse(node)}"
        assert name not in {"pd.read_pickle", "torch.jit.load", "eval", "exec"}, ast.unparse(node)
        assert keyword(node, "trust_remote_code") in (None, "False"), ast.unparse(node)


def test_numpy_load_rejects_an_object_array(tmp_path: Path) -> None:
    """What allow_pickle=False buys: an object array in a .npy is refused, not unpickled."""
    path = tmp_path / "evil.npy"
    np.save(path, np.array([{"payload": 1}], dtype=object), allow_pickle=True)
    from vlbench.rank.index import build_flat_index

    with pytest.raises(ValueError, match="pickle"):
        build_flat_index(path, tmp_path / "x.faiss")


class Payload:
    """A Python object a malicious checkpoint might smuggle in."""


def test_checkpoint_with_arbitrary_object_is_refused(tmp_path: Path) -> None:
    """The model loader reads checkpoints with weights_only=True: a pickled object is refused."""
    from vlbench.embedding.models import load_model

    path = tmp_path / "evil.pt"
    torch.save({"state_dict": {"w": torch.zeros(1)}, "extra": Payload()}, path)
    spec = {"name": "vlbench-tiny", "model_config": str(TINY_MODEL_CONFIG), "pretrained": str(path)}
    with pytest.raises(Exception, match=r"(?i)weights.only|unsupported|global"):
        load_model(spec)
