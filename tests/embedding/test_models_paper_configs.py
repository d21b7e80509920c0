"""The model entries of the paper-table configs: valid, guarded, pinned or clearly unpinned."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from workflow_helpers import validate

from vlbench.embedding.models import hub_pins, load_model, local_paths, unpinned
from vlbench.errors import VlbenchError
from vlbench.workflow.checks import missing_local_paths

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
    """An unpinned hub model is pinned on first use (vlbench.workflow.pinning), not a warning."""
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


def test_pin_lists_the_current_commit_of_each_unpinned_repository(tmp_path, loopback_hub, capsys):
    from vlbench.embedding.models import pin

    datacomp = "laion/CLIP-ViT-L-14-DataComp.XL-s13B-b90K"
    sha_a = loopback_hub.commit("model", "org/a", {"README.md": b"a"})
    sha_c = loopback_hub.commit("model", datacomp, {"README.md": b"c"})
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "models": {
                    "a": {"name": "hf-hub:org/a"},
                    "b": {"name": "hf-hub:org/b", "revision": "b" * 40},
                    "c": {"name": "ViT-L-14", "pretrained": "datacomp_xl_s13b_b90k"},
                }
            }
        )
    )
    assert pin.main([str(config)]) == 0
    out = capsys.readouterr().out
    asked = [path for _, path, _ in loopback_hub.requests if path.startswith("/api/models/")]
    assert asked == ["/api/models/org/a/revision/main", f"/api/models/{datacomp}/revision/main"]
    assert f"models.a.revision: {sha_a}" in out and f"models.c.revision: {sha_c}" in out
    assert "models.b" not in out


def closed_port_endpoint() -> str:
    """A hub endpoint on 127.0.0.1 where nothing listens: connections are refused."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def offline_env(tmp_path: Path, endpoint: str) -> dict[str, str]:
    """The environment of a subprocess whose hub (HF_ENDPOINT, read at import) is unreachable."""
    import os

    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    return {**env, "HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf-home")}


def test_pin_exits_non_zero_with_one_line_per_failed_lookup_when_offline(tmp_path: Path) -> None:
    import subprocess
    import sys

    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump({"models": {"a": {"name": "hf-hub:org/a"}, "b": {"name": "hf-hub:org/b"}}})
    )
    endpoint = closed_port_endpoint()
    result = subprocess.run(
        [sys.executable, "-m", "vlbench.embedding.models.pin", str(config)],
        capture_output=True,
        text=True,
        env=offline_env(tmp_path, endpoint),
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 3, result.stderr
    for key, line in zip("ab", lines, strict=False):
        assert line.startswith(f"{config}: models.{key}.revision: model org/{key}: ")
        assert f"the hub at {endpoint} could not be reached" in line
        assert "local-dir:" in line
    assert lines[2] == "vlbench error: 2 lookup(s) failed (listed above)"
