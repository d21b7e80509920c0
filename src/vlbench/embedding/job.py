"""The embed rule's work: every shard of both modalities of a benchmark through one model.

Read top down: `run` (one (model, benchmark) of the job) plans each modality's shards and
reuses every stored one whose content key still matches; each other shard goes through the
loader and the model (`encode.embed_shard`) into the pair's resume folder
(`shard_files.ShardStore`); the job's output is the pair's list of stored shards
(`shard_list`), which the pair's gather job turns into the matrices. So a killed job resumes
shard by shard, an edited caption re-embeds only its text shard, and a job whose shards are all
stored loads no model.
"""

from __future__ import annotations

import gc
import logging
import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vlbench.embedding.encode import embed_shard
from vlbench.embedding.gpu_slots import claim_gpu
from vlbench.embedding.matrix_files import MatrixFiles
from vlbench.embedding.models import EmbeddingModel, load_model, model_provenance
from vlbench.embedding.settings import EmbedSettings, result_settings
from vlbench.embedding.shard_files import ShardStore, gather_shards, plan_shards
from vlbench.embedding.shard_list import write_shard_list
from vlbench.errors import VlbenchError
from vlbench.hashing import weights_sha256

log = logging.getLogger("vlbench")

# Texts first: while another job still decodes a shared pixel-cache shard, this job's text
# forward overlaps that decode instead of waiting behind it.
MODALITY_ORDER = ("text", "image")

# A loaded model and its provenance record, loaded when first asked for.
LoadModel = Callable[[], tuple[EmbeddingModel, dict[str, Any]]]


@dataclass(frozen=True)
class EmbeddingJob:
    """One (model, benchmark): what to load, how to embed, what to read and where to store.

    `identity` (the configured spec, its user files' fingerprint and the result settings) is
    what a stored shard's content key depends on besides its rows. `shard_list`: the pair's
    list of stored shards (the embed rule's output for the pair).
    """

    model: dict[str, Any]
    identity: dict[str, Any]
    settings: EmbedSettings
    sources: Mapping[str, Path]
    resume_dir: Path
    shard_list: Path


def run(job: EmbeddingJob, model: ModelOnce | None = None) -> dict[str, list[dict[str, Any]]]:
    """Embed (or reuse) every shard of every modality and write the pair's list of stored
    shards; return each modality's shard records. `model`: one already made for another
    benchmark of the same model, loaded at most once for all of them."""
    torch.set_num_threads(job.settings.threads)
    model = model or ModelOnce(job.model, job.identity, job.settings.batch_size)
    stored = {modality: store_modality(job, modality, model) for modality in MODALITY_ORDER}
    write_shard_list(job.shard_list, job.identity, stored)
    return {modality: [record for _, record in shards] for modality, shards in stored.items()}


def run_models(
    jobs: Mapping[tuple[str, str], EmbeddingJob],
) -> dict[tuple[str, str], dict[str, list[dict[str, Any]]]]:
    """The (model, benchmark) pairs of one embed job (embedding.jobs), model by model: each
    model is loaded once, the first time a shard of any of its benchmarks needs it, and let go
    before the next; return each pair's records."""
    results: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {}
    for model_key in dict.fromkeys(model for model, _ in jobs):
        pairs = {pair: job for pair, job in jobs.items() if pair[0] == model_key}
        first = next(iter(pairs.values()))
        model = ModelOnce(first.model, first.identity, first.settings.batch_size, model_key)
        results.update({pair: run(job, model) for pair, job in pairs.items()})
        del model
        release_accelerator_memory()
    return results


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
    for shard in plan_shards(modality, job.sources[modality], job.settings.shard_size):
        record = store.stored(shard)
        reused = record is not None
        if record is None:
            model, model_record = load()
            record = store.save(shard, *embed_shard(model, model_record, shard, job.settings))
        log_shard(record, reused)
        stored.append((f"{modality}/{shard.name}", {**record, "reused": reused}))
    return stored


def embed_with_loaded_model(
    model: EmbeddingModel,
    spec: dict[str, Any],
    source: Path,
    modality: str,
    settings: EmbedSettings,
    out_dir: Path,
) -> Path:
    """One modality through a model loaded already, with the workflow's files and resume rule:
    shards stored under `out_dir/shards/<modality>/`, gathered into `out_dir/<modality>.npy`
    (returned)."""
    out = MatrixFiles.at(Path(out_dir) / modality)
    job = EmbeddingJob(
        model=spec,
        identity={"model": spec, "embedding": result_settings(settings)},
        settings=settings,
        sources={modality: Path(source)},
        resume_dir=Path(out_dir) / "shards",
        shard_list=Path(out_dir) / "shards.json",
    )
    stored = store_modality(job, modality, lambda: (model, {"model": spec}))
    files = [MatrixFiles.at(job.resume_dir / stem) for stem, _ in stored]
    gather_shards(files, [record for _, record in stored], out)
    return out.embeddings


def log_shard(record: dict[str, Any], reused: bool) -> None:
    """One line per shard in the rule log: reused, or its speed and pixel-cache use."""
    modality, (start, stop) = record["modality"], record["rows"]
    if reused:
        log.info("%s rows %d-%d: stored shard reused", modality, start, stop)
        return
    log.info(
        "%s rows %d-%d: %s items/s, pixel cache %s",
        modality,
        start,
        stop,
        record["items_per_second"],
        record.get("pixel_cache", "n/a"),
    )
    if record.get("texts_at_context_limit"):
        log.warning(
            "%d texts fill the whole context of %s tokens: longer ones were truncated",
            record["texts_at_context_limit"],
            record.get("context_length", "the model's"),
        )


class ModelOnce:
    """The job's model, loaded (on a GPU of its own, when there is one) the first time a shard
    needs it, then kept."""

    def __init__(
        self, spec: dict[str, Any], identity: dict[str, Any], batch_size: int, key: str = ""
    ) -> None:
        self.spec = spec
        self.identity = identity
        self.batch_size = batch_size
        self.key = key or str(spec.get("name"))
        self.loaded: tuple[EmbeddingModel, dict[str, Any]] | None = None

    def __call__(self) -> tuple[EmbeddingModel, dict[str, Any]]:
        if self.loaded is None:
            # Locally Snakemake sets no CUDA_VISIBLE_DEVICES: lock a GPU of our own first.
            log.info(claim_gpu().describe())
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
