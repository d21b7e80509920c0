"""An embed job's plan, made before torch is imported: what is stored, what is left to embed.

For every (model, benchmark) pair of the job and each modality, the plan cuts the prepared file
into shards and looks each one up in the pair's resume folder once: a shard stored under its
current content key (`vlbench.embedding.identity`) whose files still hold the bytes written is
reused; every other one (missing, stale or damaged) is left to embed. Image shards left to
embed are grouped by benchmark images and shard (`ImageWork`): the pairs of one group share
one pass over the shard's pixels when their loaded models share a geometry
(`vlbench.embedding.job`). A plan with nothing left writes each pair's list of stored shards
without importing torch or loading a model (`JobPlan.write_lists`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_files import Shard, ShardStore, plan_shards
from vlbench.embedding.shard_list import write_shard_list

log = logging.getLogger("vlbench")

# A (model key, benchmark key) pair of an embed job.
PairKey = tuple[str, str]
# A pair's records: each modality's shard records, in row order.
Records = dict[str, list[dict[str, Any]]]
# The order in which a job embeds a pair's modalities (texts first, as each model loads).
EMBED_ORDER = ("text", "image")


@dataclass(frozen=True)
class Pair:
    """One (model, benchmark) of an embed job: what to load, what to read and where to store.

    `identity` (the configured spec, its user files' fingerprint and the result settings:
    `vlbench.embedding.identity`) is what a stored shard's content key depends on besides its
    rows. `shard_list`: the pair's list of stored shards (the embed rule's output for the
    pair). `pixel_folder`: the benchmark's pixel-cache folder (None: not cached).
    """

    spec: dict[str, Any]
    identity: dict[str, Any]
    sources: Mapping[str, Path]
    resume_dir: Path
    shard_list: Path
    pixel_folder: Path | None = None

    def shards(self, modality: str, shard_size: int) -> list[Shard]:
        """The shards of one modality's prepared file (image shards name the pixel folder)."""
        folder = self.pixel_folder if modality == "image" else None
        return plan_shards(modality, self.sources[modality], shard_size, folder)

    def store(self, modality: str) -> ShardStore:
        """The pair's stored shards of one modality."""
        return ShardStore(self.resume_dir / modality, self.identity)


@dataclass(frozen=True)
class EmbedJob:
    """What an embed rule hands to the package: the job's settings and its pairs, in order."""

    settings: EmbedSettings
    pairs: Mapping[PairKey, Pair]


@dataclass
class PairPlan:
    """One pair's shards per modality, and for each its stored record (None: to embed)."""

    pair: Pair
    shards: dict[str, list[Shard]]
    records: dict[str, list[dict[str, Any] | None]]

    def missing(self, modality: str) -> list[Shard]:
        """The shards of a modality left to embed, in row order."""
        pending = zip(self.shards[modality], self.records[modality], strict=True)
        return [shard for shard, record in pending if record is None]

    @property
    def complete(self) -> bool:
        """Whether every shard of the pair is stored."""
        return not any(self.missing(modality) for modality in self.shards)

    def save(self, shard: Shard, ids: list[str], matrix: Any, record: dict[str, Any]) -> None:
        """Store a shard this job embedded (its ids, matrix and provenance record) in the
        pair's resume folder, and note it as stored."""
        stored = self.pair.store(shard.modality).save(shard, ids, matrix, record)
        self.records[shard.modality][shard.index] = {**stored, "reused": False}
        log_shard(stored, reused=False)


@dataclass(frozen=True)
class ImageWork:
    """One image shard left to embed and the pairs (one model each) that need it."""

    shard: Shard
    pairs: tuple[PairKey, ...]


@dataclass
class JobPlan:
    """The plan of one embed job: its settings and every pair's plan, in the job's order."""

    settings: EmbedSettings
    pairs: dict[PairKey, PairPlan] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Whether nothing is left to embed (then no model is loaded, torch not imported)."""
        return all(plan.complete for plan in self.pairs.values())

    def models_to_load(self) -> list[str]:
        """The model keys with a shard left to embed, in the job's order."""
        keys = [model for (model, _), plan in self.pairs.items() if not plan.complete]
        return list(dict.fromkeys(keys))

    def pairs_of(self, model: str) -> dict[PairKey, PairPlan]:
        """A model's pairs, in the job's order."""
        return {key: plan for key, plan in self.pairs.items() if key[0] == model}

    def spec(self, model: str) -> Pair:
        """The first pair of a model (its spec and identity are the same in every pair)."""
        return next(iter(self.pairs_of(model).values())).pair

    def texts_left(self, model: str) -> list[tuple[PairKey, Shard]]:
        """A model's text shards left to embed, pair by pair in row order."""
        pairs = self.pairs_of(model).items()
        return [(key, shard) for key, plan in pairs for shard in plan.missing("text")]

    def images_left(self, models: Iterable[str]) -> list[ImageWork]:
        """The image shards the pairs of `models` leave to embed: per benchmark images (and
        pixel folder), shard by shard, each with the pairs that need it."""
        wanted = set(models)
        groups: dict[tuple[Path, Path | None], list[PairKey]] = {}
        for key, plan in self.pairs.items():
            if key[0] in wanted:
                images = (plan.pair.sources["image"], plan.pair.pixel_folder)
                groups.setdefault(images, []).append(key)
        work = []
        for keys in groups.values():
            for shard in self.pairs[keys[0]].shards["image"]:
                needing = tuple(
                    key for key in keys if self.pairs[key].records["image"][shard.index] is None
                )
                if needing:
                    work.append(ImageWork(shard, needing))
        return work

    def write_lists(self, keys: Iterable[PairKey] | None = None) -> dict[PairKey, Records]:
        """Write the list of stored shards of each pair of `keys` (default: all), every shard
        of which must be stored; return their records."""
        written = {}
        for key in self.pairs if keys is None else keys:
            plan = self.pairs[key]
            if not plan.complete:
                raise RuntimeError(f"{plan.pair.shard_list}: a shard was left unstored")
            records = {
                modality: [record for record in got if record is not None]
                for modality, got in plan.records.items()
            }
            entries = {
                modality: [
                    (f"{modality}/{shard.name}", record)
                    for shard, record in zip(plan.shards[modality], records[modality], strict=True)
                ]
                for modality in records
            }
            write_shard_list(plan.pair.shard_list, plan.pair.identity, entries)
            written[key] = records
        return written


def job_settings(
    models: Mapping[str, Mapping[str, Any]], config: Mapping[str, Any], threads: int
) -> EmbedSettings:
    """An embed job's one settings object: the result settings every model's identity carries
    (the rule's param: changing one reruns the job) and the speed knobs of the run's `embedding`
    config section (read at run time: changing one reruns nothing; `threads`: the job's, after
    --set-threads and the --cores cap)."""
    results = [given["identity"]["embedding"] for given in models.values()]
    if any(result != results[0] for result in results):
        raise ValueError("the models of one embed job must share their result settings")
    return EmbedSettings.for_job(results[0], config, threads)


def plan_job(job: EmbedJob) -> JobPlan:
    """Look up every shard of every pair once: each stored one (files checked against their
    digests) is reused, every other one is left to embed."""
    plan = JobPlan(job.settings)
    for key, pair in job.pairs.items():
        size = job.settings.shard_size
        shards = {modality: pair.shards(modality, size) for modality in EMBED_ORDER}
        records: dict[str, list[dict[str, Any] | None]] = {}
        for modality, cut in shards.items():
            store = pair.store(modality)
            records[modality] = []
            for shard in cut:
                record = store.stored(shard)
                if record is not None:
                    log_shard(record, reused=True)
                    record = {**record, "reused": True}
                records[modality].append(record)
        plan.pairs[key] = PairPlan(pair, shards, records)
    return plan


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
