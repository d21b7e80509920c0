"""How an embedding job runs: the config's `embedding` section, with the schema's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from vlbench.config import RUN_TIME_KEYS, schema_defaults


@dataclass(frozen=True)
class EmbedSettings:
    """The config's `embedding` section (the keys an embedding pass reads).

    The defaults live in the config schema only; build settings with `from_config`.
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


def result_settings(settings: EmbedSettings) -> dict[str, Any]:
    """The settings that can change an embedding's numbers (not the speed knobs)."""
    speed = RUN_TIME_KEYS["embedding"]
    return {key: value for key, value in asdict(settings).items() if key not in speed}
