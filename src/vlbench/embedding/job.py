"""The embed rule's work, executed from its plan: embed only what the plan left, store it.

Read top down: `run_plan` takes a `JobPlan` (`vlbench.embedding.plan`: every stored shard
reused and verified there, the rest left to embed, as plain data), loads the models that have
work in waves (`vlbench.embedding.waves.Waves`), embeds each model's text shards as it loads,
then each image shard of the wave once for every model that shares its pass key
(`encode.embed_images_together`), stores every shard in its pair's resume folder
(`shard_files.ShardStore`) and writes each pair's list of stored shards (`shard_list`), which
the pair's gather job turns into the matrices. So a killed job resumes shard by shard, an
edited caption re-embeds only its text shard, and a job whose shards are all stored loads no
model (the rule script then does not even import this module).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vlbench.embedding.encode import embed_images_together, embed_shard
from vlbench.embedding.plan import ImageWork, JobPlan, PairKey
from vlbench.embedding.shard_files import Shard, log_shard
from vlbench.embedding.shard_list import Records, write_lists
from vlbench.embedding.waves import LoadedModel, PassKey, Waves


def run_plan(plan: JobPlan) -> dict[PairKey, Records]:
    """Embed and store every shard the plan left; write each pair's list of stored shards as
    soon as all of them are stored (a wave's pairs at the wave's end); return each pair's
    records, in the job's order."""
    loading = {work.key for work in plan.models}
    results = write_lists({k: p for k, p in plan.pairs.items() if k[0] not in loading})
    with Waves(plan) as waves:
        for work, model, wave_ends in waves:
            for key, shard in work.texts:
                store(plan, key, shard, embed_shard(model, shard, plan.settings))
            if wave_ends:
                store_images(plan, waves)
                wave = {k: p for k, p in plan.pairs.items() if k[0] in waves.models}
                results.update(write_lists(wave))
    return {key: results[key] for key in plan.pairs}


def store_images(plan: JobPlan, waves: Waves) -> None:
    """Embed and store the image shards the wave's pairs left: each shard in one pass for every
    model of the wave that shares its pass key (the pass opened ahead, when it is that one)."""
    for work in plan.images:
        for group in passes(work, waves.models).values():
            models = [waves.models[key[0]] for key in group]
            key = models[0].pass_key
            opened = waves.ahead.take(work.shard, key) if waves.ahead is not None else None
            if len(group) == 1 and opened is None:
                embedded = [embed_shard(models[0], work.shard, plan.settings)]
            else:
                embedded = embed_images_together(models, work.shard, plan.settings, opened)
            for pair, shard_files in zip(group, embedded, strict=True):
                store(plan, pair, work.shard, shard_files)


def passes(
    work: ImageWork, models: Mapping[str, LoadedModel]
) -> dict[PassKey | PairKey, list[PairKey]]:
    """The pairs of the wave's models that need an image shard, grouped into passes: one for
    all whose models share a pass key, one of its own for each whose model has none."""
    grouped: dict[PassKey | PairKey, list[PairKey]] = {}
    for key in work.pairs:
        if key[0] in models:
            shared = models[key[0]].pass_key
            grouped.setdefault(shared if shared is not None else key, []).append(key)
    return grouped


def store(
    plan: JobPlan, key: PairKey, shard: Shard, embedded: tuple[list[str], Any, dict[str, Any]]
) -> None:
    """Store a shard the job embedded for a pair, note it in the pair's plan and log it."""
    pair = plan.pairs[key]
    record = pair.stores[shard.modality].save(shard, *embedded)
    pair.records[shard.modality][shard.index] = {**record, "reused": False}
    log_shard(record, reused=False)
