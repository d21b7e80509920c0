"""What reruns an embedding has one owner (vlbench.embedding.identity): the docs' table is its
rendering, the schema says the same of every `embedding` key, planning and the job read it,
and the keys it makes are those shards were stored under before it existed."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from workflow_helpers import REPO

from vlbench.config import load_schema, schema_defaults, validate_config
from vlbench.embedding import identity
from vlbench.embedding.settings import EmbedSettings
from vlbench.planning.job_params import JobParams


def test_the_architecture_docs_table_is_the_modules_rendering() -> None:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    begin, end = text.index(identity.TABLE_BEGIN), text.index(identity.TABLE_END)
    assert text[begin : end + len(identity.TABLE_END)] == identity.rerun_table()


def test_every_embedding_key_is_an_input_or_neutral_as_the_schema_says() -> None:
    """The schema's `x-reruns` (config/README.md's rerun column) agrees key by key."""
    keys = load_schema()["properties"]["embedding"]["properties"]
    for key, spec in keys.items():
        reruns = spec["x-reruns"]
        if key in identity.RUN_TIME:
            assert reruns == "nothing", key
        elif key in identity.JOB_SHAPE:
            assert reruns.startswith("**job shape**"), key
        else:
            assert reruns.startswith("**embeddings**"), key
    section = schema_defaults("embedding")
    assert set(identity.result_settings(section)) == set(keys) - set(identity.RESULT_NEUTRAL_KEYS)
    assert set(identity.result_settings(section)) <= set(EmbedSettings.__dataclass_fields__)


def test_planning_and_the_job_read_the_same_identity_and_settings() -> None:
    config = validate_config(
        {
            "models": {"m": {"name": "ViT-B-32", "pretrained": "openai"}},
            "benchmarks": {"demo": {"protocol": "paired", "source": {"synthetic": {}}}},
            "embedding": {"batch_size": 8, "threads": 3, "num_workers": 1, "jobs": "single"},
        },
        "test",
    )
    planned = JobParams(config).embedding_identity("m")
    assert planned == identity.embedding_identity(config["models"]["m"], "", config["embedding"])
    assert set(planned["embedding"]) == set(identity.result_settings(config["embedding"]))
    settings = EmbedSettings.for_job({"m": {"identity": planned}}, config["embedding"], threads=5)
    # Result keys from the identity, speed knobs from the config, threads from the job.
    assert settings == EmbedSettings.from_config({**config["embedding"], "threads": 5}), asdict(
        settings
    )
    assert identity.result_settings(asdict(settings)) == planned["embedding"]


def test_content_keys_and_identity_digests_are_those_stored_shards_carry() -> None:
    """Written out independently: a change here would embed every stored shard again."""
    given = {"model": {"name": "x"}, "model_files": "", "embedding": {"batch_size": 4}}
    payload = json.dumps({"rows": "abc", **given}, sort_keys=True, default=str)
    assert identity.content_key("abc", given) == hashlib.sha256(payload.encode()).hexdigest()[:24]
    whole = json.dumps(given, sort_keys=True, default=str)
    assert identity.identity_digest(given) == hashlib.sha256(whole.encode()).hexdigest()[:24]
