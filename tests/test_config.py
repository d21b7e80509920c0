"""Config validation: defaults, one-line errors naming the key, constrained keys."""

from __future__ import annotations

import copy
import re
from dataclasses import asdict
from pathlib import Path

import pytest
from workflow_helpers import REPO, SCHEMA, synthetic_benchmark, tiny_model, validate

from vlbench.cli import build_parser
from vlbench.config import (
    JOB_SHAPE_KEYS,
    RUN_TIME_KEYS,
    SCHEMA_PATH,
    load_schema,
    result_keys,
    schema_defaults,
)
from vlbench.embedding.settings import EmbedSettings
from vlbench.errors import VlbenchError
from vlbench.metrics.rows import StatsSettings
from vlbench.planning.config_reference import render
from vlbench.planning.run_config import load_run_config
from vlbench.yaml_files import read_yaml_mapping


def minimal() -> dict:
    return {"models": {"tiny": tiny_model()}, "benchmarks": {"demo": synthetic_benchmark()}}


def test_defaults_are_filled() -> None:
    config = minimal()
    del config["benchmarks"]["demo"]["k"]
    validated = validate(config)
    assert validated["benchmarks"]["demo"]["k"] == [1, 10, 100, 1000]
    assert validated["models"]["tiny"]["precision"] == "fp32"
    assert validated["embedding"]["batch_size"] == 64
    assert validated["ranking"] == {"tie_policy": "index", "block_mb": 1024}
    assert validated["benchmarks"]["demo"]["source"]["synthetic"] == {"pairs": 40, "seed": 0}
    assert "embedding" not in config, "validation must not mutate its input"


def test_default_config_file_is_valid() -> None:
    config = read_and_validate(REPO / "config" / "config.yaml")
    assert list(config["models"]) == ["tiny-random"]


def test_typo_in_model_key_names_key_and_allowed_ones() -> None:
    config = minimal()
    config["models"]["tiny"]["pretrianed"] = "openai"
    with pytest.raises(VlbenchError) as info:
        validate(config, "mine.yaml")
    message = str(info.value)
    assert "\n" not in message
    assert "'pretrianed'" in message and "models.tiny" in message
    assert "pretrained" in message and "model_config" in message  # the allowed keys
    assert message.startswith("mine.yaml")


def test_typo_at_top_level() -> None:
    config = minimal()
    config["benchmark"] = config.pop("benchmarks")
    with pytest.raises(VlbenchError, match=r"'benchmark'.*allowed: benchmarks, data_root, "):
        validate(config)


@pytest.mark.parametrize("key", ["../escape", "a/b", "x..y", ".hidden", "", "a" * 65])
def test_keys_used_in_paths_are_constrained(key: str) -> None:
    config = minimal()
    config["models"][key] = config["models"].pop("tiny")
    with pytest.raises(VlbenchError, match="models"):
        validate(config)


def test_unpinned_hub_revision_is_rejected() -> None:
    config = minimal()
    config["benchmarks"]["demo"]["source"] = {
        "repo": "Alejandro98/BioMedFlickr",
        "revision": "main",
    }
    with pytest.raises(VlbenchError, match="revision"):
        validate(config)


def test_source_with_unknown_key_names_it() -> None:
    config = minimal()
    config["benchmarks"]["demo"]["source"] = {"path": "x", "splt": "test"}
    with pytest.raises(VlbenchError, match="'splt'"):
        validate(config)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(VlbenchError, match="config file not found"):
        read_and_validate(tmp_path / "absent.yaml")


def test_nested_typo_in_a_source_form_names_that_key() -> None:
    config = minimal()
    config["benchmarks"]["demo"]["source"] = {"path": "x", "expected": {"rowz": 3}}
    with pytest.raises(VlbenchError) as info:
        validate(config)
    assert "'rowz'" in str(info.value) and "benchmarks.demo.source.expected" in str(info.value)


def test_source_of_no_known_form_lists_the_forms() -> None:
    config = minimal()
    config["benchmarks"]["demo"]["source"] = {"split": "test"}
    with pytest.raises(VlbenchError, match=r"forms: repo; path; synthetic"):
        validate(config)


DUPLICATE_MODEL = """\
models:
  tiny:
    name: ViT-B-32
  other:
    name: ViT-B-16
  tiny:
    name: ViT-L-14
benchmarks:
  demo: {protocol: paired, source: {synthetic: {pairs: 2}}}
"""


def test_duplicate_model_key_names_file_key_and_line(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(DUPLICATE_MODEL, encoding="utf-8")
    with pytest.raises(VlbenchError) as info:
        read_and_validate(path)
    message = str(info.value)
    assert message.startswith(f"{path}: line 6: key 'tiny' is given twice (first at line 2)")
    assert "\n" not in message


def test_duplicate_keys_in_a_configfile_the_workflow_reads(tmp_path: Path) -> None:
    """Snakemake reads --configfile (YAML or JSON) keeping the last key silently; the workflow
    reads each config file again and refuses a key given twice, naming the line."""
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text(DUPLICATE_MODEL, encoding="utf-8")
    with pytest.raises(VlbenchError, match=r"c\.yaml: line 6: key 'tiny' is given twice"):
        load_run_config([yaml_file])
    nested = tmp_path / "nested.yaml"
    nested.write_text("ranking:\n  block_mb: 1\n  tie_policy: index\n  block_mb: 2\n")
    with pytest.raises(VlbenchError, match=r"line 4: key 'block_mb' is given twice"):
        read_yaml_mapping(nested, "config file")
    json_file = tmp_path / "c.json"
    json_file.write_text('{"models": {"tiny": {}, "tiny": {"name": "x"}}}', encoding="utf-8")
    with pytest.raises(VlbenchError, match=r"c\.json: line 1: key 'tiny' is given twice"):
        read_yaml_mapping(json_file, "config file")
    tabs = tmp_path / "tabs.json"  # JSON indented with tabs is not YAML; Snakemake reads it
    tabs.write_text('{\n\t"models": {\n\t\t"a": {}, "a": {}\n\t}\n}\n', encoding="utf-8")
    with pytest.raises(VlbenchError, match=r"tabs\.json: key 'a' is given twice in one object"):
        read_yaml_mapping(tabs, "config file")
    tabs.write_text('{\n\t"pins": "lock"\n}\n', encoding="utf-8")
    assert read_yaml_mapping(tabs, "config file") == {"pins": "lock"}
    # Overriding a key brought in by a merge is not a duplicate.
    merged = tmp_path / "merged.yaml"
    merged.write_text("base: &b {name: x, precision: fp32}\nmodels:\n  a: {<<: *b, name: y}\n")
    entry = read_yaml_mapping(merged, "config file")["models"]["a"]
    assert entry == {"name": "y", "precision": "fp32"}
    for shipped in sorted((REPO / "config").rglob("*.yaml")):
        read_yaml_mapping(shipped, "config file")


def read_and_validate(path: Path) -> dict:
    """A config file read and validated as the workflow does."""
    return validate(read_yaml_mapping(path, "config file"), str(path))


def test_every_default_is_read_from_the_one_schema() -> None:
    """Settings and the command line take their defaults from the schema the workflow validates."""
    assert SCHEMA.resolve() == SCHEMA_PATH.resolve()
    filled = validate(minimal())
    embed = asdict(EmbedSettings.from_config())
    assert schema_defaults("embedding") == filled["embedding"]
    job_settings = {
        key: value
        for key, value in filled["embedding"].items()
        if key not in JOB_SHAPE_KEYS["embedding"]
    }
    assert {key: embed[key] for key in job_settings} == job_settings
    stats = StatsSettings.from_config()
    assert asdict(stats) == {key: filled["metrics"][key] for key in asdict(stats)}
    score = build_parser().parse_args(
        [
            *("score", "--protocol", "paired", "--queries", "q", "--query-ids", "qi"),
            *("--gallery", "g", "--gallery-ids", "gi", "--direction", "image_to_text"),
            *("--out", "-"),
        ]
    )
    assert (score.tie_policy, score.block_mb) == tuple(filled["ranking"].values())
    assert (score.confidence, score.bootstrap_samples, score.seed) == tuple(
        filled["metrics"][key] for key in ("confidence", "bootstrap_samples", "seed")
    )


def readme_rows(section: str) -> dict[str, list[str]]:
    """The key rows of a section's table in config/README.md: key -> its cells."""
    text = (REPO / "config" / "README.md").read_text(encoding="utf-8")
    body = text.split(f"<!-- keys:{section} -->", 1)[1].split(f"<!-- end keys:{section} -->", 1)[0]
    rows = {}
    for line in body.splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if line.startswith("| `"):
            rows[cells[0].strip("`")] = cells
    return rows


def test_the_readme_key_tables_are_written_from_the_schema() -> None:
    """Every key's meaning, default and rerun class has one source, the schema; the README's
    tables are its rendering (`python -m vlbench.planning.config_reference config/README.md`)."""
    text = (REPO / "config" / "README.md").read_text(encoding="utf-8")
    assert render(text) == text


@pytest.mark.parametrize(
    ("section", "keys"),
    [
        ("top", lambda schema: schema["properties"]),
        ("models", lambda schema: schema["$defs"]["model"]["properties"]),
        ("benchmarks", lambda schema: schema["$defs"]["benchmark"]["properties"]),
        *[
            (section, lambda schema, section=section: schema["properties"][section]["properties"])
            for section in ("prepare", "embedding", "ranking", "metrics", "tables")
        ],
    ],
)
def test_every_key_is_documented_with_what_it_reruns(section: str, keys) -> None:
    rows = readme_rows(section)
    assert set(rows) == set(keys(load_schema()))
    assert all(len(cells) == 4 and all(cells) for cells in rows.values()), section


def test_a_key_the_schema_leaves_undocumented_is_refused_by_name() -> None:
    schema = copy.deepcopy(load_schema())
    del schema["properties"]["ranking"]["properties"]["block_mb"]["x-reruns"]
    with pytest.raises(VlbenchError, match=r"ranking\.block_mb has no x-reruns"):
        render("<!-- keys:ranking -->\n<!-- end keys:ranking -->", schema)


@pytest.mark.parametrize(
    ("keys_of", "reruns", "bullet"),
    [
        (RUN_TIME_KEYS, "nothing", "- **nothing**:"),
        (JOB_SHAPE_KEYS, "**job shape**", "- **job shape**:"),
    ],
)
def test_keys_that_change_no_number_are_no_params_and_say_what_they_rerun(
    keys_of: dict[str, tuple[str, ...]], reruns: str, bullet: str
) -> None:
    """Speed knobs rerun nothing; a key that only cuts the work into jobs reruns those jobs
    once. Neither is a param, and config/README.md lists each in its rerun class."""
    filled = validate(minimal())
    text = (REPO / "config" / "README.md").read_text(encoding="utf-8")
    listed = text.split(bullet, 1)[1].split("\n- ", 1)[0]
    for section, keys in keys_of.items():
        rows = readme_rows(section)
        for key in keys:
            assert key in schema_defaults(section), f"{section}.{key}"
            assert key not in result_keys(filled, section), f"{section}.{key}"
            assert rows[key][-1] == reruns, f"{section}.{key}"
            assert f"`{section}.{key}`" in listed, f"{section}.{key}"


def test_result_keys_are_the_rest() -> None:
    filled = validate(minimal())
    for section in {*RUN_TIME_KEYS, *JOB_SHAPE_KEYS}:
        neutral = {*RUN_TIME_KEYS.get(section, ()), *JOB_SHAPE_KEYS.get(section, ())}
        assert set(result_keys(filled, section)) == set(filled[section]) - neutral
    assert filled["prepare"] == {"threads": 2}
