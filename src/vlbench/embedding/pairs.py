"""The (model, benchmark) pairs of an embed job, and their records when every shard is stored.

A job whose every shard of every pair is stored under its current content key, its files
intact (a job that runs again only because its set of pairs changed), writes each pair's list
of stored shards here without importing torch or loading a model (`stored_records`); any other
job goes through `vlbench.embedding.job.run_models`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_files import Shard, ShardStore, plan_shards
from vlbench.embedding.shard_list import write_shard_list

log = logging.getLogger("vlbench")

# A pair's records: each modality's shard records, in row order.
Records = dict[str, list[dict[str, Any]]]


@dataclass(frozen=True)
class EmbeddingJob:
    """One (model, benchmark): what to load, how to embed, what to read and where to store.

    `identity` (the configured spec, its user files' fingerprint and the result settings) is
    what a stored shard's content key depends on besides its rows. `shard_list`: the pair's
    list of stored shards (the embed rule's output for the pair). `pixel_folder`: the
    benchmark's pixel-cache folder (None: its decoded pixels are not cached).
    """

    model: dict[str, Any]
    identity: dict[str, Any]
    settings: EmbedSettings
    sources: Mapping[str, Path]
    resume_dir: Path
    shard_list: Path
    pixel_folder: Path | None = None

    def shards(self, modality: str) -> list[Shard]:
        """The shards of one modality's prepared file (image shards name the pixel folder)."""
        folder = self.pixel_folder if modality == "image" else None
        return plan_shards(modality, self.sources[modality], self.settings.shard_size, folder)


def log_shard(record: dict[str, Any], reused: bool) -> None:
    """One line per shard in the rule log: reused, or its speed and pixel-cache use."""
    modality, (start, stop) = record["modality"], record["rows"]
    if reused:
        log.info("%s rows %d-%d: stored shard reused", modality, start, stop)
        return
    together = record.get("embedded_with")
    log.info(
        "%s rows %d-%d: %s items/s%s, pixel cache %s",
        modality,
        start,
        stop,
        record["items_per_second"],
        f" (one pass for {len(together)} models)" if together else "",
        record.get("pixel_cache", "n/a"),
    )
    if record.get("texts_at_context_limit"):
        log.warning(
            "%d texts fill the whole context of %s tokens: longer ones were truncated",
            record["texts_at_context_limit"],
            record.get("context_length", "the model's"),
        )


# A stored shard as a pair's list names it: its file stem in the resume folder
# (`<modality>/<shard>`) and its provenance record, marked reused or embedded.
Entry = tuple[str, dict[str, Any]]


def shard_entry(modality: str, shard: Shard, record: dict[str, Any], reused: bool) -> Entry:
    """A stored shard's entry in its pair's list."""
    return f"{modality}/{shard.name}", {**record, "reused": reused}


def list_pair(job: EmbeddingJob, stored: Mapping[str, list[Entry]]) -> Records:
    """Write a pair's list of stored shards (each modality's entries, in row order); return its
    records."""
    write_shard_list(job.shard_list, job.identity, stored)
    return {modality: [record for _, record in entries] for modality, entries in stored.items()}


def stored_records(
    jobs: Mapping[tuple[str, str], EmbeddingJob],
) -> dict[tuple[str, str], Records] | None:
    """Each pair's records when every shard of every pair is stored with intact files, after
    writing each pair's list of stored shards; None, with nothing written, when any shard must
    be embedded (a damaged one included: `run_models` says so when it embeds it again)."""
    stored: dict[tuple[str, str], dict[str, list[Entry]]] = {}
    for pair, job in jobs.items():
        stored[pair] = {}
        for modality in ("text", "image"):
            store = ShardStore(job.resume_dir / modality, job.identity)
            entries = []
            for shard in job.shards(modality):
                record, damaged = store.checked(shard)
                if record is None or damaged:
                    return None
                entries.append(shard_entry(modality, shard, record, reused=True))
            stored[pair][modality] = entries
    for modalities in stored.values():
        for entries in modalities.values():
            for _, record in entries:
                log_shard(record, reused=True)
    return {pair: list_pair(job, stored[pair]) for pair, job in jobs.items()}
