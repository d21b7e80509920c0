"""What reruns an embedding: the one place that names every input of an embedding's identity
and every `embedding` key that is result-neutral.

A stored shard is reused while its content key (`content_key`) is unchanged. The key is a
digest of the shard's rows and of the model's identity (`embedding_identity`):

- the shard's rows: each row's id and payload (encoded image bytes, or the exact text) and a
  non-legacy decode policy of the images file (`shard_files.shard_digests`);
- the model's configured entry (`models.<key>`: name, pretrained, pinned revisions,
  random_init_seed, precision, adapter keys ...);
- the fingerprint of the user files the model reads (model_config, local weights, local
  hub-layout folders: `planning.checks.model_fingerprint`);
- the `embedding` keys that can change a number (`result_settings`: every key of the section
  but the result-neutral ones).

Planning writes the identity as a param of the embed job and of the model's
`embedding_identity` job (a change reruns both), the embed job stores each shard under the key,
and each gather checks that its pair's list was written for the current identity
(`identity_digest`). `RERUNS` says, for each input and each neutral key, what a change
reruns; docs/architecture.md holds its table (`rerun_table`, checked by a test).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from vlbench.config import JOB_SHAPE_KEYS, RUN_TIME_KEYS, result_keys, schema_defaults

SECTION = "embedding"
# Keys of the `embedding` section that change no number (config.py classifies every section:
# speed knobs, and the key that cuts the work into jobs).
RUN_TIME = RUN_TIME_KEYS[SECTION]
JOB_SHAPE = JOB_SHAPE_KEYS[SECTION]
RESULT_NEUTRAL_KEYS: tuple[str, ...] = (*RUN_TIME, *JOB_SHAPE)

# What a change to each input of an embedding, or to a neutral key, reruns: (the change, the
# function that reads it into the content key or keeps it out, what reruns). The result keys'
# names are filled in from the schema when the table is rendered (`rerun_table`).
RERUNS: tuple[tuple[str, str, str], ...] = (
    (
        "a shard's rows (ids, payloads, the images' decode policy)",
        "`shard_files.shard_digests`",
        "the embed job, which embeds that one shard again; the pair's gather",
    ),
    (
        "the model's configured entry (`models.<key>`)",
        "`identity.embedding_identity`",
        "the embed job, which embeds every shard of the model again; the model's "
        "`embedding_identity` job and gathers",
    ),
    (
        "the model's user files (model_config, local weights)",
        "`planning.checks.model_fingerprint`",
        "the same as its configured entry",
    ),
    (
        "an `embedding` result key ({result_keys})",
        "`identity.result_settings`",
        "every embed job, each shard embedded again; every `embedding_identity` job and gather",
    ),
    (
        "a speed knob (" + ", ".join(f"`{key}`" for key in RUN_TIME) + ")",
        "`identity.RUN_TIME` (`config.RUN_TIME_KEYS`)",
        "nothing: read from the config at run time (`EmbedSettings.for_job`), never a param",
    ),
    (
        "the job shape (" + ", ".join(f"`{key}`" for key in JOB_SHAPE) + ")",
        "`identity.JOB_SHAPE` (`config.JOB_SHAPE_KEYS`)",
        "the renamed embed jobs once, each reusing every stored shard; no gather (each reads "
        "its pair's list `ancient`)",
    ),
)

# The markers of the generated table in docs/architecture.md.
TABLE_BEGIN, TABLE_END = "<!-- embedding-reruns -->", "<!-- end embedding-reruns -->"


def result_settings(embedding: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of an `embedding` section (or settings) that can change a number."""
    return result_keys({SECTION: embedding}, SECTION)


def embedding_identity(
    spec: Mapping[str, Any], model_files: str, embedding: Mapping[str, Any]
) -> dict[str, Any]:
    """What a model's embeddings depend on besides the rows: its configured spec (random-init
    seed and pinned revision included), its user files' fingerprint (`model_files`) and the
    result settings of the `embedding` section."""
    return {
        "model": dict(spec),
        "model_files": model_files,
        "embedding": result_settings(embedding),
    }


def content_key(rows_digest: str, identity: Mapping[str, Any]) -> str:
    """A stored shard's content key: its rows' digest and the model's identity."""
    payload = json.dumps({"rows": rows_digest, **identity}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def identity_digest(identity: Mapping[str, Any]) -> str:
    """A digest of an identity, as the embed job's lists and the identity files record it."""
    payload = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def rerun_table() -> str:
    """`RERUNS` as the Markdown table docs/architecture.md holds between its markers."""
    names = ", ".join(f"`{key}`" for key in result_settings(schema_defaults(SECTION)))
    lines = ["| a change to | read by | reruns |", "| --- | --- | --- |"]
    lines += [
        f"| {change.format(result_keys=names)} | {owner} | {reruns} |"
        for change, owner, reruns in RERUNS
    ]
    return "\n".join([TABLE_BEGIN, *lines, TABLE_END])
