"""Config validation: defaults, one-line errors naming the key, constrained keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from workflow_helpers import REPO, synthetic_benchmark, tiny_model

from vlbench.config import read_config, validate_config
from vlbench.errors import VlbenchError


def minimal() -> dict:
    return {"models": {"tiny": tiny_model()}, "benchmarks": {"demo": synthetic_benchmark()}}


def test_defaults_are_filled() -> None:
    config = minimal()
    del config["benchmarks"]["demo"]["k"]
    validated = validate_config(config)
    assert validated["benchmarks"]["demo"]["k"] == [1, 10, 100, 1000]
    assert validated["models"]["tiny"]["precision"] == "fp32"
    assert validated["embedding"]["batch_size"] == 64
    assert validated["ranking"] == {"tie_policy": "index", "block_mb": 1024}
    assert validated["benchmarks"]["demo"]["source"]["synthetic"] == {"pairs": 40, "seed": 0}
    assert "embedding" not in config, "validation must not mutate its input"


def test_default_config_file_is_valid() -> None:
    config = read_config(REPO / "config" / "config.yaml")
    assert list(config["models"]) == ["tiny-random"]


def test_typo_in_model_key_names_key_and_allowed_ones() -> None:
    config = minimal()
    config["models"]["tiny"]["pretrianed"] = "openai"
    with pytest.raises(VlbenchError) as info:
        validate_config(config, "mine.yaml")
    message = str(info.value)
    assert "\n" not in message
    assert "'pretrianed'" in message and "models.tiny" in message
    assert "pretrained" in message and "model_config" in message  # the allowed keys
    assert message.startswith("mine.yaml")


def test_typo_at_top_level() -> None:
    config = minimal()
    config["benchmark"] = config.pop("benchmarks")
    with pytest.raises(VlbenchError, match=r"'benchmark'.*allowed: benchmarks, embedding"):
        validate_config(config)


@pytest.mark.parametrize("key", ["../escape", "a/b", "x..y", ".hidden", "", "a" * 65])
def test_keys_used_in_paths_are_constrained(key: str) -> None:
    config = minimal()
    config["models"][key] = config["models"].pop("tiny")
    with pytest.raises(VlbenchError, match="models"):
        validate_config(config)


def test_unpinned_hub_revision_is_rejected() -> None:
    config = minimal()
    config["benchmarks"]["demo"]["source"] = {
        "repo": "Alejandro98/BioMedFlickr",
        "revision": "main",
    }
    with pytest.raises(VlbenchError, match="revision"):
        validate_config(config)


def test_source_with_unknown_key_names_it() -> None:
    config = minimal()
    config["benchmarks"]["demo"]["source"] = {"path": "x", "splt": "test"}
    with pytest.raises(VlbenchError, match="'splt'"):
        validate_config(config)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(VlbenchError, match="config file not found"):
        read_config(tmp_path / "absent.yaml")


def test_nested_typo_in_a_source_form_names_that_key() -> None:
    config = minimal()
    config["benchmarks"]["demo"]["source"] = {"path": "x", "expected": {"rowz": 3}}
    with pytest.raises(VlbenchError) as info:
        validate_config(config)
    assert "'rowz'" in str(info.value) and "benchmarks.demo.source.expected" in str(info.value)


def test_source_of_no_known_form_lists_the_forms() -> None:
    config = minimal()
    config["benchmarks"]["demo"]["source"] = {"split": "test"}
    with pytest.raises(VlbenchError, match=r"repo \+ revision; path; synthetic"):
        validate_config(config)
