"""The static open_clip tag table planning reads instead of importing open_clip."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vlbench.embedding.models.dispatch import hub_pins
from vlbench.embedding.models.open_clip_tags import (
    TABLE,
    check_activation,
    registry_table,
    write_table,
)
from vlbench.errors import VlbenchError


def test_static_table_equals_the_installed_open_clip_registry(tmp_path: Path) -> None:
    shipped = json.loads(TABLE.read_text(encoding="utf-8"))
    assert shipped == registry_table(), (
        "open_clip's registry changed: run `python -m vlbench.embedding.models.open_clip_tags`"
    )
    write_table(tmp_path / "table.json")
    assert (tmp_path / "table.json").read_bytes() == TABLE.read_bytes()


def test_pins_of_tags_are_known_without_importing_open_clip_or_torch() -> None:
    code = """
import sys
from vlbench.embedding.models.dispatch import hub_pins
print(hub_pins({"name": "ViT-L-14", "pretrained": "laion2b_s32b_b82k"}))
print(hub_pins({"name": "RN50-quickgelu", "pretrained": "yfcc15m"}))
print(hub_pins({"name": "x", "adapter": "pmc_clip", "pretrained": "hf-hub:axiong/pmc_oa"}))
print(sorted(m for m in ("torch", "open_clip", "transformers") if m in sys.modules))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    laion, url_download, pmc, imported = result.stdout.splitlines()
    assert laion == "[('revision', 'laion/CLIP-ViT-L-14-laion2B-s32B-b82K', 'model')]"
    assert url_download == "[]"  # a URL download from mlfoundations: nothing to pin
    assert "('revision', 'axiong/pmc_oa', 'dataset')" in pmc
    assert "microsoft/BiomedNLP-PubMedBERT-base-uncased-abstract-fulltext" in pmc
    assert imported == "[]"


@pytest.mark.parametrize(
    ("name", "tag", "refusal"),
    [
        ("ViT-B-16", "openai", "trained with QuickGELU but 'ViT-B-16' builds plain GELU"),
        ("RN50", "yfcc15m", "use name 'RN50-quickgelu'"),
        ("roberta-ViT-B-32", "laion2b_s12b_b32k", "trained with plain GELU"),
    ],
)
def test_weights_of_the_other_activation_are_refused_at_plan_time(
    name: str, tag: str, refusal: str
) -> None:
    with pytest.raises(VlbenchError, match=refusal):
        check_activation(name, tag)
    with pytest.raises(VlbenchError, match=refusal):
        hub_pins({"name": name, "pretrained": tag})


def test_matching_activations_pass() -> None:
    check_activation("ViT-B-16-quickgelu", "openai")
    check_activation("ViT-B-16", "laion2b_s34b_b88k")
    check_activation("RN50-quickgelu", "yfcc15m")


@pytest.mark.parametrize(
    "spec",
    [
        {"name": "RN50-quickgelu", "pretrained": "yfcc15m", "revision": "a" * 40},
        {"name": "ViT-B-16", "pretrained": "/weights/model.pt", "revision": "a" * 40},
    ],
)
def test_a_revision_that_would_pin_nothing_is_refused(spec: dict) -> None:
    with pytest.raises(VlbenchError, match="'revision' pins a hub repository, but this model"):
        hub_pins(spec)
