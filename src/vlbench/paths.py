"""Where the workflow writes: every results path the package and the rule files share.

Patterns keep Snakemake's `{wildcard}` fields, so a rule can declare them as outputs and the
package can fill them in (`str.format`) for a given model or benchmark.
"""

from __future__ import annotations

from collections.abc import Sequence

from vlbench.protocols import DIRECTIONS, Protocol

SYNTHETIC_SOURCE = "results/sources/{benchmark}"
RANDOM_CHECKPOINT = "results/checkpoints/{model}.pt"
PREPARED_DIR = "results/data/{benchmark}"
MODALITY_FILES = {"image": "images.parquet", "text": "texts.parquet"}
MODALITIES = tuple(MODALITY_FILES)  # ("image", "text")
# One (model, benchmark)'s embeddings: <modality>.npy, .ids.parquet and .json (its gather job's
# outputs), the resume folder of its stored shards, shards/<modality>/shard-XXXXX.*, and the
# list of those shards, shards.json (the embed job's output for the pair, the gather's input).
EMBEDDINGS_DIR = "results/embeddings/{model}/{benchmark}"
EMBEDDING_SHARDS = EMBEDDINGS_DIR + "/shards"
EMBEDDING_SHARD_LIST = EMBEDDINGS_DIR + "/shards.json"
# A model's embedding identity (spec, files' fingerprint, result settings), rewritten only when
# it changes: what tells each of the model's gathers that its shards must be gathered again.
EMBEDDING_IDENTITY = "results/embeddings/{model}/identity.json"
# The files of one (model, benchmark)'s embeddings, by output name (the gather rule's outputs).
EMBEDDING_FILES = {
    f"{modality}{name}": f"{EMBEDDINGS_DIR}/{modality}{suffix}"
    for modality in MODALITIES
    for name, suffix in (("", ".npy"), ("_ids", ".ids.parquet"), ("_provenance", ".json"))
}
PIXEL_CACHE_DIR = "results/pixels"
# Written by a failed run beside the tables it did not update (vlbench.workflow.failures); the
# next complete run removes it.
FAILED_RUN_NOTE = "results/tables/LAST_RUN_FAILED.md"
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


# One (model, benchmark)'s evaluation: a faiss index per gallery modality, then per direction
# the exact ranks, the metric rows and the per-query outcomes; zero-shot adds per-class results.
INDEX = "results/index/{model}/{benchmark}/{modality}.faiss"
RANKS = "results/ranks/{model}/{benchmark}/{direction}.parquet"
METRICS = "results/metrics/{model}/{benchmark}/{direction}.csv"
OUTCOMES = "results/metrics/{model}/{benchmark}/{direction}.outcomes.parquet"
PER_CLASS = "results/metrics/{model}/{benchmark}/per_class.csv"
TIMINGS_DIR = "results/timings"
# A zero-shot benchmark's probe folds (which images train each fold of a classifier; one file
# per benchmark, shared by every model) and a model's probe metric rows.
PROBE_CLASSIFIERS = ("linear", "logistic")
PROBE_FOLDS = "results/folds/{benchmark}/{classifier}.parquet"
PROBE_METRICS = "results/metrics/{model}/{benchmark}/probe_{classifier}.csv"


def galleries(directions: Sequence[str]) -> list[str]:
    """The gallery modalities the directions search, in direction order."""
    return list(dict.fromkeys(DIRECTIONS[direction][1] for direction in directions))


def evaluation_outputs(protocol: Protocol, directions: Sequence[str]) -> dict[str, str]:
    """The named files of one evaluation job (patterns with model and benchmark) of a protocol
    over its benchmark's directions: `index_<gallery>`, `ranks_<direction>`,
    `metrics_<direction>`, `outcomes_<direction>`, and `per_class` for a protocol with a
    per-class table."""
    outputs = {
        f"index_{gallery}": INDEX.replace("{modality}", gallery)
        for gallery in galleries(directions)
    }
    for direction in directions:
        for kind, pattern in (("ranks", RANKS), ("metrics", METRICS), ("outcomes", OUTCOMES)):
            outputs[f"{kind}_{direction}"] = pattern.replace("{direction}", direction)
    if protocol.per_class:
        outputs["per_class"] = PER_CLASS
    return outputs
