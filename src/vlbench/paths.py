"""Where the workflow writes: every results path the package and the rule files share.

Patterns keep Snakemake's `{wildcard}` fields, so a rule can declare them as outputs and the
package can fill them in (`str.format`) for a given model or benchmark.
"""

from __future__ import annotations

SYNTHETIC_SOURCE = "results/sources/{benchmark}"
RANDOM_CHECKPOINT = "results/checkpoints/{model}.pt"
PREPARED_DIR = "results/data/{benchmark}"
MODALITY_FILES = {"image": "images.parquet", "text": "texts.parquet"}
SHARD_PLAN = "results/shards/{benchmark}/{modality}.json"
# One (model, benchmark)'s embeddings: <modality>.npy (gathered), <modality>/shard-XXXXX.npy
# (the shards) and shards/shard-XXXXX.json (the record of the job that embedded shard k of
# every modality).
EMBEDDINGS_DIR = "results/embeddings/{model}/{benchmark}"
EMBED_JOB_RECORD = EMBEDDINGS_DIR + "/shards/{shard}.json"
PIXEL_CACHE_DIR = "results/pixels"
GPU_LOCK_DIR = "results/.gpu-locks"


def synthetic_source(benchmark: str) -> str:
    """The folder the workflow writes a synthetic benchmark source to."""
    return SYNTHETIC_SOURCE.format(benchmark=benchmark)


def random_checkpoint(model: str) -> str:
    """The checkpoint file the workflow writes a random-init model's weights to."""
    return RANDOM_CHECKPOINT.format(model=model)


def modality_file(benchmark: str, modality: str) -> str:
    """The prepared parquet of one modality ("image" or "text") of a benchmark."""
    return f"{PREPARED_DIR.format(benchmark=benchmark)}/{MODALITY_FILES[modality]}"


def shard_plan(benchmark: str, modality: str) -> str:
    """The shard plan of one modality of a benchmark."""
    return SHARD_PLAN.format(benchmark=benchmark, modality=modality)
