"""How an embedding job runs: the config's `embedding` section, with the schema's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vlbench.config import schema_defaults
from vlbench.embedding.identity import RUN_TIME


@dataclass(frozen=True)
class EmbedSettings:
    """The config's `embedding` section (the keys an embedding pass reads).

    The defaults live in the config schema only; build settings with `from_config`, or with
    `for_job` in an embed job.
    """

    batch_size: int
    threads: int
    num_workers: int | None
    shard_size: int
    storage_dtype: str
    pixel_cache: bool
    draft_decode: bool
    trim_text_padding: bool

    @property
    def decode_workers(self) -> int:
        """DataLoader worker processes: `num_workers`, or one per thread of the job when null."""
        return self.threads if self.num_workers is None else self.num_workers

    @classmethod
    def from_config(cls, embedding: Mapping[str, Any] | None = None, **extra: Any) -> EmbedSettings:
        """Settings from an `embedding` config section (missing keys: the schema's defaults)."""
        section = {**schema_defaults("embedding"), **(embedding or {}), **extra}
        known = {key: value for key, value in section.items() if key in cls.__dataclass_fields__}
        return cls(**known)

    @classmethod
    def for_job(
        cls, models: Mapping[str, Mapping[str, Any]], config: Mapping[str, Any], threads: int
    ) -> EmbedSettings:
        """An embed job's one settings object, from the rule's `models` param (each model's
        spec and identity) and the run's `embedding` config section: the result settings the
        models' identities carry (a param: changing one reruns the job), the speed knobs of the
        config (read at run time: changing one reruns nothing); `threads`: the job's, after
        --set-threads and the --cores cap."""
        results = [given["identity"]["embedding"] for given in models.values()]
        if any(result != results[0] for result in results):
            raise ValueError("the models of one embed job must share their result settings")
        speed = {key: config[key] for key in RUN_TIME if key in config}
        return cls.from_config({**results[0], **speed}, threads=threads)
