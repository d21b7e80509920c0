"""The embed rule's work, executed from its plan: embed only what the plan left, store it.

Read top down: `run_plan` takes a `JobPlan` (`vlbench.embedding.plan`: every stored shard
reused and verified there, every other shard left to embed), loads the models that have work in
waves (`vlbench.embedding.waves`), embeds each loaded model's text shards, then each image shard
of the wave once for every model that shares its pass key (`encode.embed_images_together`),
stores every shard in its pair's resume folder (`shard_files.ShardStore`) and writes each
pair's list of stored shards, which the pair's gather job turns into the matrices. So a killed
job resumes shard by shard, an edited caption re-embeds only its text shard, and a job whose
shards are all stored loads no model (the rule script then does not even import this module).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from vlbench.embedding.batches import PixelPass
from vlbench.embedding.encode import embed_images_together, embed_shard
from vlbench.embedding.loaded_model import LoadedModel, PassKey
from vlbench.embedding.plan import ImageWork, JobPlan, PairKey, Records
from vlbench.embedding.waves import AheadPass, Wave, waves


def run_plan(plan: JobPlan) -> dict[PairKey, Records]:
    """Embed and store every shard the plan left, then write each pair's list of stored shards
    (a wave's pairs once its shards are stored); return each pair's records."""
    results = plan.write_lists(key for key, pair in plan.pairs.items() if pair.complete)

    def store_texts(model: LoadedModel) -> None:
        for key, shard in plan.texts_left(model.key):
            plan.pairs[key].save(shard, *embed_shard(model, shard, plan.settings))

    with contextlib.closing(waves(plan, store_texts)) as loaded:
        for wave in loaded:
            store_images(plan, wave)
            listed = [key for key in plan.pairs if key[0] in wave.models and key not in results]
            results.update(plan.write_lists(listed))
    return {key: results[key] for key in plan.pairs}


def store_images(plan: JobPlan, wave: Wave) -> None:
    """Embed and store the image shards the wave's pairs left: each shard in one pass for every
    model of the wave that shares its pass key (the pass opened ahead, when it is that one)."""
    for work in plan.images_left(wave.models):
        for group in passes(work, wave.models).values():
            models = [wave.models[key[0]] for key in group]
            opened = _opened(wave.ahead, work, models[0].pass_key)
            if len(group) == 1 and opened is None:
                embedded = [embed_shard(models[0], work.shard, plan.settings)]
            else:
                embedded = embed_images_together(models, work.shard, plan.settings, opened)
            for key, shard_files in zip(group, embedded, strict=True):
                plan.pairs[key].save(work.shard, *shard_files)


def passes(
    work: ImageWork, models: Mapping[str, LoadedModel]
) -> dict[PassKey | PairKey, list[PairKey]]:
    """The pairs of an image shard grouped into passes: one for all pairs whose models share a
    pass key, one of its own for each pair whose model has none."""
    grouped: dict[PassKey | PairKey, list[PairKey]] = {}
    for key in work.pairs:
        shared = models[key[0]].pass_key
        grouped.setdefault(shared if shared is not None else key, []).append(key)
    return grouped


def _opened(ahead: AheadPass | None, work: ImageWork, key: PassKey | None) -> PixelPass | None:
    """The pass opened ahead, if it is this shard's pass for models of pass key `key`."""
    return ahead.take(work.shard, key) if ahead is not None else None
