"""The model entries of the paper-table configs: valid, guarded, pinned or clearly unpinned."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from workflow_helpers import validate

from vlbench.embedding.models import hub_pins, load_model, local_paths, unpinned
from vlbench.errors import VlbenchError
from vlbench.planning.checks import missing_local_paths

ROOT = Path(__file__).resolve().parents[2]
TABLES = ["biomedflickr", "biocap", "biovita", "retrieval-classic"]
SYNTHETIC = {"s": {"protocol": "paired", "source": {"synthetic": {"pairs": 2}}}}


def table_models(table: str) -> dict:
    with open(ROOT / "config" / f"{table}.yaml", encoding="utf-8") as handle:
        return yaml.safe_load(handle)["models"]


def model_cases():
    for table in TABLES:
        for key, spec in table_models(table).items():
            yield pytest.param(table, key, spec, id=f"{table}-{key}")


@pytest.mark.parametrize("table", TABLES)
def test_models_block_validates_against_the_schema(table: str) -> None:
    config = validate({"models": table_models(table), "benchmarks": SYNTHETIC}, table)
    assert config["models"]


@pytest.mark.parametrize(("table", "key", "spec"), list(model_cases()))
def test_every_entry_passes_the_guards_and_stops_only_at_a_missing_pin_or_file(
    table, key, spec, monkeypatch
):
    """Offline, an entry stops at a missing pin or file, or (pinned) at the download itself."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    expected = r"is not pinned|checkpoint file not found|download failed|cannot download"
    with pytest.raises(VlbenchError, match=expected) as error:
        load_model(spec, torch.device("cpu"))
    assert "QuickGELU" not in str(error.value)
    if "download" in str(error.value):  # only a pinned repository is ever downloaded
        unpinned_repos = [repo for field, repo, _ in hub_pins(spec) if not spec.get(field)]
        assert not any(f" {repo}@" in str(error.value) for repo in unpinned_repos)


@pytest.mark.parametrize(("table", "key", "spec"), list(model_cases()))
def test_every_hub_download_is_listed_for_pinning(table, key, spec):
    pins = hub_pins(spec)
    assert all(len(repo.split("/")) == 2 for _, repo, _ in pins)
    assert len(unpinned(spec)) == sum(1 for field, _, _ in pins if not spec.get(field))
    if not pins:
        assert local_paths(spec), f"{key} loads from neither the hub nor a local path"


def test_expected_repositories_and_keys() -> None:
    pmc = table_models("biomedflickr")["pmc-clip"]
    assert hub_pins(pmc) == [
        ("revision", "axiong/pmc_oa", "dataset"),
        (
            "text_model_revision",
            "microsoft/BiomedNLP-PubMedBERT-base-uncased-abstract-fulltext",
            "model",
        ),
    ]
    dfn = table_models("biomedflickr")["vit-h-14-378-dfn5b"]
    assert hub_pins(dfn) == [("revision", "apple/DFN5B-CLIP-ViT-H-14-378", "model")]
    assert hub_pins({"name": "hf-hub:imageomics/biocap"}) == [
        ("revision", "imageomics/biocap", "model")
    ]


def test_parse_time_warnings_name_missing_models_not_unpinned_ones(tmp_path: Path) -> None:
    """An unpinned hub model is pinned on first use (vlbench.planning.pinning), not a warning."""
    models = {
        "hub": {"name": "hf-hub:org/repo"},
        "pinned": {"name": "hf-hub:org/repo", "revision": "a" * 40},
        "dir": {"name": f"local-dir:{tmp_path / 'nope'}"},
        "pmc": {
            "adapter": "pmc_clip",
            "name": "PMC-CLIP",
            "pretrained": str(tmp_path / "pmc"),
            "text_model": f"local-dir:{tmp_path}",
        },
    }
    lines = missing_local_paths({"models": models, "benchmarks": SYNTHETIC})
    assert not any(line.startswith(("models.hub", "models.pinned")) for line in lines)
    assert f"models.dir.name: directory not found: {tmp_path / 'nope'}" in lines
    assert f"models.pmc.pretrained: directory not found: {tmp_path / 'pmc'}" in lines
    (tmp_path / "pmc").mkdir()
    assert not any(
        line.startswith("models.pmc")
        for line in missing_local_paths({"models": models, "benchmarks": SYNTHETIC})
    )
