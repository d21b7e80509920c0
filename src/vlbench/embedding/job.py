"""The embed rule's work: every shard of both modalities of each (model, benchmark) of the job.

Read top down: `run_models` (the job's pairs) plans each modality's shards and reuses every
stored one whose content key still matches; each other shard goes through the loader and the
model (`encode.embed_shard`; an image shard once for every model of a wave that shares its
pixels, `encode.embed_images_together`) into the pair's resume folder
(`shard_files.ShardStore`); the job's output is each pair's list of stored shards
(`shard_list`), which the pair's gather job turns into the matrices. So a killed job resumes
shard by shard, an edited caption re-embeds only its text shard, and a job whose shards are all
stored loads no model (the rule script then does not even import this module:
`vlbench.embedding.pairs.stored_records`).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import platform
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vlbench.embedding.batches import PixelPass
from vlbench.embedding.encode import embed_images_together, embed_shard
from vlbench.embedding.gpu_slots import GpuClaim, claim_gpu
from vlbench.embedding.image_transform import ImagePipeline
from vlbench.embedding.matrix_files import MatrixFiles
from vlbench.embedding.models import (
    EmbeddingModel,
    import_adapters_ahead,
    load_model,
    model_provenance,
)
from vlbench.embedding.models.dispatch import import_ahead
from vlbench.embedding.models.open_clip_geometry import predicted_size, square_pipeline
from vlbench.embedding.pairs import EmbeddingJob, list_pair, log_shard, shard_entry
from vlbench.embedding.settings import EmbedSettings, result_settings
from vlbench.embedding.shard_files import Shard, ShardStore, gather_shards
from vlbench.errors import VlbenchError
from vlbench.hashing import weights_sha256

log = logging.getLogger("vlbench")

# The share of the device's memory the models of one wave may hold (`run_models`): a wave of
# models embeds its image shards in one pass each.
MODEL_MEMORY_SHARE = 0.25
# Memory limits of the job's control group (v2, v1), where they exist ("max" fails to parse).
CGROUP_MEMORY_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")

# A loaded model and its provenance record, loaded when first asked for.
LoadModel = Callable[[], tuple[EmbeddingModel, dict[str, Any]]]


def run(job: EmbeddingJob) -> dict[str, list[dict[str, Any]]]:
    """Embed (or reuse) every shard of every modality of one (model, benchmark) and write its
    list of stored shards; return each modality's shard records (`run_models` of one pair)."""
    pair = (str(job.model.get("name")), str(job.resume_dir))
    return run_models({pair: job})[pair]


def run_models(
    jobs: Mapping[tuple[str, str], EmbeddingJob],
) -> dict[tuple[str, str], dict[str, list[dict[str, Any]]]]:
    """The (model, benchmark) pairs of one embed job (embedding.jobs); return each pair's
    records.

    Models are loaded once each, the first time a shard of any of their benchmarks needs them,
    in waves: a wave takes models (embedding their texts as each loads) until they hold about
    `MODEL_MEMORY_SHARE` of the device's memory; then each image shard of the wave's benchmarks
    is decoded (or read from the pixel cache) once for every model of the wave that shares its
    geometry (`store_images`), and the wave is let go before the next.
    """
    results: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {}
    wave: dict[str, ModelOnce] = {}
    texts: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = {}
    held = 0
    ahead: AheadPass | None = None
    imports: threading.Thread | None = None
    try:
        # The first image pass starts decoding on the first model's predicted geometry before
        # the adapters' modules import (its decode worker is forked while no other thread runs).
        first_key = next(iter(jobs))[0] if jobs else ""
        ahead = AheadPass.predicted({p: j for p, j in jobs.items() if p[0] == first_key})
        imports = import_adapters_ahead(job.model for job in jobs.values())
        for model_key in dict.fromkeys(model for model, _ in jobs):
            pairs = {pair: job for pair, job in jobs.items() if pair[0] == model_key}
            first = next(iter(pairs.values()))
            torch.set_num_threads(first.settings.threads)
            model = ModelOnce(
                first.model, first.identity, first.settings.batch_size, model_key, imports
            )
            wave[model_key] = model
            # The wave's first image pass starts decoding while the models load and embed texts
            # (a pass opened on a prediction is kept only if the loaded model confirms it).
            ahead = ahead.confirmed(pairs, model) if ahead else AheadPass.open(pairs, model)
            texts.update({pair: store_modality(job, "text", model) for pair, job in pairs.items()})
            if model.loaded is not None:
                held += model_bytes(model.loaded[0])
                if held >= memory_budget(model.loaded[0].device):
                    results.update(_finish_wave(jobs, wave, texts, ahead))
                    wave, held, ahead = {}, 0, None
        if wave:
            results.update(_finish_wave(jobs, wave, texts, ahead))
    finally:
        if ahead is not None:
            ahead.pixels.close()
        if imports is not None:
            imports.join()
    return results


def _finish_wave(
    jobs: Mapping[tuple[str, str], EmbeddingJob],
    wave: dict[str, ModelOnce],
    texts: Mapping[tuple[str, str], list[tuple[str, dict[str, Any]]]],
    ahead: AheadPass | None,
) -> dict[tuple[str, str], dict[str, list[dict[str, Any]]]]:
    """Store the image shards of the wave's pairs, write each pair's list of stored shards and
    let the wave's models go; return each pair's records."""
    pairs = {pair: job for pair, job in jobs.items() if pair[0] in wave}
    try:
        images = store_images(pairs, wave, ahead)
    finally:
        if ahead is not None:  # not taken (no model needed its shard after all)
            ahead.pixels.close()
    results = {
        pair: list_pair(job, {"text": texts[pair], "image": images[pair]})
        for pair, job in pairs.items()
    }
    wave.clear()
    release_accelerator_memory()
    return results


@dataclass
class AheadPass:
    """An image pass opened before the models that take it are all loaded: the pass of the
    first image shard a wave's first model needs, decoding while the wave loads."""

    source: Path
    shard: int
    key: tuple[Any, ...]
    pixels: PixelPass
    # Opened on a predicted geometry (`predicted`), not yet confirmed by the loaded model.
    predicted_only: bool = False

    @classmethod
    def open(
        cls, pairs: Mapping[tuple[str, str], EmbeddingJob], model: LoadModel
    ) -> AheadPass | None:
        """The pass of the first image shard of `pairs` not stored yet (loading the model to
        learn its geometry), or None when there is none or its pixels cannot be shared. Stored
        shards are only looked up here (`ShardStore.listed`): `store_images` checks their files
        when it reuses them, and one found damaged there gets a pass of its own."""
        found = _first_unstored_image_shard(pairs)
        if found is None:
            return None
        job, shard = found
        loaded = model()[0]
        key = pass_key(loaded, job.settings)
        if key is None:
            return None
        pin = loaded.device.type == "cuda"
        pixels = PixelPass(ImagePipeline.from_model(loaded), shard, job.settings, pin)
        return cls(shard.source, shard.index, key, pixels)

    @classmethod
    def predicted(cls, pairs: Mapping[tuple[str, str], EmbeddingJob]) -> AheadPass | None:
        """The pass `open` would give the pairs' model, opened before the model loads on the
        geometry its spec predicts (`predicted_size`), or None when nothing is predicted."""
        first = next(iter(pairs.values()), None)
        size = predicted_size(first.model) if first and first.settings.pixel_cache else None
        if size is None:
            return None
        # torchvision's transforms (seconds) import while the shards are hashed; the thread
        # ends before the decode worker is forked.
        importer = import_ahead(["torchvision.transforms"])
        try:
            found = _first_unstored_image_shard(pairs)
        finally:
            importer.join()
        if found is None:
            return None
        pipeline = square_pipeline(size)
        if not pipeline.cacheable:
            return None
        job, shard = found
        # The job's GPU is claimed first: pinning the pass's batches initialises CUDA, after
        # which narrowing CUDA_VISIBLE_DEVICES has no effect (vlbench.embedding.gpu_slots).
        log.info(claimed_gpu().describe())
        device_type = "cuda" if torch.cuda.device_count() > 0 else "cpu"  # as load_model picks
        key = _key(pipeline, job.settings, device_type)
        pixels = PixelPass(pipeline, shard, job.settings, device_type == "cuda")
        log.info("image pass opened on the predicted geometry %s", pipeline.summary)
        return cls(shard.source, shard.index, key, pixels, predicted_only=True)

    def confirmed(
        self, pairs: Mapping[tuple[str, str], EmbeddingJob], model: LoadModel
    ) -> AheadPass | None:
        """This pass, once the loaded model's pass key equals the predicted one (the pass then
        records the model's own geometry summary); else it is closed and `open` gives the
        model's pass."""
        if not self.predicted_only:
            return self
        job = next(iter(pairs.values()))
        loaded = model()[0]
        if pass_key(loaded, job.settings) == self.key:
            self.pixels.adopt(ImagePipeline.from_model(loaded))
            self.predicted_only = False
            return self
        log.info("the loaded model's geometry differs from the predicted one: pass reopened")
        self.pixels.close()
        return AheadPass.open(pairs, model)

    def take(self, source: Path, shard: int, key: tuple[Any, ...] | None) -> PixelPass | None:
        """The opened pass if it is the one asked for (once), else None."""
        if (source, shard, key) != (self.source, self.shard, self.key):
            return None
        self.key = ()  # taken
        return self.pixels


def store_images(
    jobs: Mapping[tuple[str, str], EmbeddingJob],
    models: Mapping[str, LoadModel],
    ahead: AheadPass | None = None,
) -> dict[tuple[str, str], list[tuple[str, dict[str, Any]]]]:
    """`store_modality` of the images of several (model, benchmark) pairs: each image shard no
    pair has stored is embedded in one pass for every model that shares its pixels
    (`pass_key`), through `encode.embed_images_together` (`ahead`: a pass opened already);
    return each pair's shards."""
    stored: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = {pair: [] for pair in jobs}
    by_source: dict[tuple[Path, int, Path | None], list[tuple[str, str]]] = {}
    for pair, job in jobs.items():
        images = (job.sources["image"], job.settings.shard_size, job.pixel_folder)
        by_source.setdefault(images, []).append(pair)
    for (source, _, _), pairs in by_source.items():
        for shard in jobs[pairs[0]].shards("image"):
            passes: dict[Any, list[tuple[tuple[str, str], ShardStore]]] = {}
            for pair in pairs:
                job = jobs[pair]
                store = ShardStore(job.resume_dir / "image", job.identity)
                record = store.stored(shard)
                if record is not None:
                    log_shard(record, reused=True)
                    stored[pair].append(shard_entry("image", shard, record, reused=True))
                    continue
                key = pass_key(models[pair[0]]()[0], job.settings)
                passes.setdefault(key if key is not None else pair, []).append((pair, store))
            for key, group in passes.items():
                loaded = [models[pair[0]]() for pair, _ in group]
                settings = jobs[group[0][0]].settings
                opened = ahead.take(source, shard.index, key) if ahead else None
                if len(group) == 1 and opened is None:
                    embedded = [embed_shard(*loaded[0], shard, settings)]
                else:
                    pipelines = [ImagePipeline.from_model(model) for model, _ in loaded]
                    embedded = embed_images_together(loaded, pipelines, shard, settings, opened)
                for (pair, store), (ids, matrix, record) in zip(group, embedded, strict=True):
                    record = store.save(shard, ids, matrix, record)
                    log_shard(record, reused=False)
                    stored[pair].append(shard_entry("image", shard, record, reused=False))
    return stored


def pass_key(model: EmbeddingModel, settings: EmbedSettings) -> tuple[Any, ...] | None:
    """What an image pass depends on besides the shard: models with equal keys see the same
    batches of the same pixels. None: the model's images go through a pass of their own (its
    preprocess does not split into cacheable geometry, or the pixel cache is off)."""
    pipeline = ImagePipeline.from_model(model)
    if not (settings.pixel_cache and pipeline.cacheable):
        return None
    return _key(pipeline, settings, model.device.type)


def _key(pipeline: ImagePipeline, settings: EmbedSettings, device_type: str) -> tuple[Any, ...]:
    return (
        pipeline.geometry_key(settings.draft_decode),
        settings.batch_size,
        settings.decode_workers,
        settings.draft_decode,
        device_type,
    )


def _first_unstored_image_shard(
    pairs: Mapping[tuple[str, str], EmbeddingJob],
) -> tuple[EmbeddingJob, Shard] | None:
    """The first image shard of `pairs` that is not listed as stored, with its pair's job."""
    for job in pairs.values():
        store = ShardStore(job.resume_dir / "image", job.identity)
        for shard in job.shards("image"):
            if store.listed(shard) is None:
                return job, shard
    return None


def model_bytes(model: EmbeddingModel) -> int:
    """The bytes of a loaded model's parameters and buffers."""
    tensors = [*model.model.parameters(), *model.model.buffers()]
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors)


def memory_budget(device: torch.device) -> int:
    """`MODEL_MEMORY_SHARE` of the device's memory: the GPU's, or this machine's (capped by the
    job's cgroup limit, as on a cluster node)."""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
    else:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        for limit in CGROUP_MEMORY_LIMITS:
            with contextlib.suppress(OSError, ValueError):
                total = min(total, int(Path(limit).read_text().strip()))
    return int(total * MODEL_MEMORY_SHARE)


def release_accelerator_memory() -> None:
    """Give the memory of a model let go back to the device, before the next model loads."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def store_modality(
    job: EmbeddingJob, modality: str, load: LoadModel
) -> list[tuple[str, dict[str, Any]]]:
    """Embed every shard of one modality not stored in the pair's resume folder under its
    current content key; return each shard's file stem (`<modality>/<shard>`, in the resume
    folder) and provenance record, in row order."""
    store = ShardStore(job.resume_dir / modality, job.identity)
    stored = []
    for shard in job.shards(modality):
        record = store.stored(shard)
        reused = record is not None
        if record is None:
            model, model_record = load()
            record = store.save(shard, *embed_shard(model, model_record, shard, job.settings))
        log_shard(record, reused)
        stored.append(shard_entry(modality, shard, record, reused))
    return stored


def embed_with_loaded_model(
    model: EmbeddingModel,
    spec: dict[str, Any],
    source: Path,
    modality: str,
    settings: EmbedSettings,
    out_dir: Path,
    pixel_folder: Path | None = None,
) -> Path:
    """One modality through a model loaded already, with the workflow's files and resume rule:
    shards stored under `out_dir/shards/<modality>/`, gathered into `out_dir/<modality>.npy`
    (returned); decoded pixels cached in `pixel_folder` (None: not cached)."""
    out = MatrixFiles.at(Path(out_dir) / modality)
    job = EmbeddingJob(
        model=spec,
        identity={"model": spec, "embedding": result_settings(settings)},
        settings=settings,
        sources={modality: Path(source)},
        resume_dir=Path(out_dir) / "shards",
        shard_list=Path(out_dir) / "shards.json",
        pixel_folder=pixel_folder,
    )
    stored = store_modality(job, modality, lambda: (model, {"model": spec}))
    files = [MatrixFiles.at(job.resume_dir / stem) for stem, _ in stored]
    gather_shards(files, [record for _, record in stored], out)
    return out.embeddings


@functools.cache
def claimed_gpu() -> GpuClaim:
    """This process's GPU, claimed once (`claim_gpu`) before anything touches CUDA."""
    return claim_gpu()


class ModelOnce:
    """The job's model, loaded (on a GPU of its own, when there is one) the first time a shard
    needs it, then kept."""

    def __init__(
        self,
        spec: dict[str, Any],
        identity: dict[str, Any],
        batch_size: int,
        key: str = "",
        imports: threading.Thread | None = None,
    ) -> None:
        self.imports = imports  # the adapters' modules being imported ahead, joined before a load
        self.spec = spec
        self.identity = identity
        self.batch_size = batch_size
        self.key = key or str(spec.get("name"))
        self.loaded: tuple[EmbeddingModel, dict[str, Any]] | None = None

    def __call__(self) -> tuple[EmbeddingModel, dict[str, Any]]:
        if self.loaded is None:
            if self.imports is not None:
                self.imports.join()
            # Locally Snakemake sets no CUDA_VISIBLE_DEVICES: lock a GPU of our own first.
            log.info(claimed_gpu().describe())
            try:
                model = load_model(self.spec)
            except VlbenchError as error:  # named by the config key the user wrote
                raise VlbenchError(f"models.{self.key}: {error}") from None
            log.info(
                "model %s on %s (CUDA_VISIBLE_DEVICES=%s)",
                self.spec["name"],
                model.device,
                os.environ.get("CUDA_VISIBLE_DEVICES"),
            )
            record = model_record(self.spec, model, self.batch_size)
            record["model_files_fingerprint"] = self.identity.get("model_files")
            self.loaded = (model, record)
        return self.loaded


def model_record(
    model_spec: dict[str, Any], model: EmbeddingModel, batch_size: int | None = None
) -> dict[str, Any]:
    """What produced an embedding: spec, weights, libraries, device, precision, host."""
    pretrained = model_spec.get("pretrained")
    weights = weights_sha256(pretrained) if pretrained and Path(pretrained).is_file() else None
    return {
        **model_provenance(model, batch_size),
        "model": model_spec,
        "weights_sha256": weights,
        "device_name": torch.cuda.get_device_name(model.device)
        if model.device.type == "cuda"
        else platform.processor() or platform.machine(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "host": platform.node(),
    }
