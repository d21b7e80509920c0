"""An embed job's plan, made before torch is imported: what is stored, what is left to embed.

For every (model, benchmark) pair of the job and each modality, `plan_job` cuts the prepared
file into shards and looks each one up in the pair's resume folder once: a shard stored under
its current content key (`vlbench.embedding.identity`) whose files still hold the bytes written
is reused; every other one (missing, stale or damaged) is left to embed. The plan then says,
as plain data, what the execution (`vlbench.embedding.job.run_plan`) has to do: the models to
load, in order, each with its text shards left, and the image shards left, each with the pairs
that need it (one pass over the shard's pixels serves those of them whose loaded models share a
geometry). A plan with no model to load writes each pair's list of stored shards
(`shard_list.write_lists`) without importing torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_files import Shard, ShardStore, plan_shards

# A (model key, benchmark key) pair of an embed job.
PairKey = tuple[str, str]
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


@dataclass(frozen=True)
class EmbedJob:
    """What an embed rule hands to the package: the job's settings and its pairs, in order."""

    settings: EmbedSettings
    pairs: Mapping[PairKey, Pair]


@dataclass
class PairPlan:
    """One pair's shards and stores per modality, and each shard's stored record (None: left
    to embed; the execution fills it in)."""

    pair: Pair
    shards: dict[str, list[Shard]]
    stores: dict[str, ShardStore]
    records: dict[str, list[dict[str, Any] | None]]


@dataclass(frozen=True)
class ModelWork:
    """A model with work: its config key, spec and identity, its text shards left (pair by
    pair, in row order) and its first image shard left (where the pass opened ahead of its
    wave starts)."""

    key: str
    spec: dict[str, Any]
    identity: dict[str, Any]
    texts: tuple[tuple[PairKey, Shard], ...]
    first_image: Shard | None


@dataclass(frozen=True)
class ImageWork:
    """One image shard left to embed and the pairs (one model each) that need it."""

    shard: Shard
    pairs: tuple[PairKey, ...]


@dataclass(frozen=True)
class JobPlan:
    """The plan of one embed job: its settings, every pair's plan (in the job's order), the
    models to load (in order; none: nothing left to embed) and the image shards left."""

    settings: EmbedSettings
    pairs: dict[PairKey, PairPlan]
    models: tuple[ModelWork, ...]
    images: tuple[ImageWork, ...]


def plan_job(job: EmbedJob) -> JobPlan:
    """Look up every shard of every pair once: each stored one (files checked against their
    digests) is reused, every other one is left to embed."""
    pairs = {}
    for key, pair in job.pairs.items():
        shards, stores, records = {}, {}, {}
        for modality in EMBED_ORDER:
            folder = pair.pixel_folder if modality == "image" else None
            source = pair.sources[modality]
            shards[modality] = plan_shards(modality, source, job.settings.shard_size, folder)
            stores[modality] = ShardStore(pair.resume_dir / modality, pair.identity)
            records[modality] = [stores[modality].reused(shard) for shard in shards[modality]]
        pairs[key] = PairPlan(pair, shards, stores, records)
    return JobPlan(job.settings, pairs, _models(pairs), _images(pairs))


def _left(plan: PairPlan, modality: str) -> list[Shard]:
    """A pair's shards of one modality left to embed, in row order."""
    pending = zip(plan.shards[modality], plan.records[modality], strict=True)
    return [shard for shard, record in pending if record is None]


def _models(pairs: Mapping[PairKey, PairPlan]) -> tuple[ModelWork, ...]:
    """The models with a shard left to embed, in the job's order."""
    models = []
    for model in dict.fromkeys(key[0] for key in pairs):
        own = {key: plan for key, plan in pairs.items() if key[0] == model}
        texts = tuple((key, shard) for key, plan in own.items() for shard in _left(plan, "text"))
        images = [shard for plan in own.values() for shard in _left(plan, "image")]
        if texts or images:
            first = next(iter(own.values())).pair
            work = ModelWork(model, first.spec, first.identity, texts, next(iter(images), None))
            models.append(work)
    return tuple(models)


def _images(pairs: Mapping[PairKey, PairPlan]) -> tuple[ImageWork, ...]:
    """The image shards left to embed: per benchmark images (and pixel folder), shard by
    shard, each with the pairs that need it."""
    groups: dict[tuple[Path, Path | None], list[PairKey]] = {}
    for key, plan in pairs.items():
        groups.setdefault((plan.pair.sources["image"], plan.pair.pixel_folder), []).append(key)
    work = []
    for keys in groups.values():
        for shard in pairs[keys[0]].shards["image"]:
            needing = tuple(key for key in keys if pairs[key].records["image"][shard.index] is None)
            if needing:
                work.append(ImageWork(shard, needing))
    return tuple(work)
