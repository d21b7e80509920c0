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
# Every file of a prepared benchmark, by the prepare rule's output name.
PREPARED_FILES = {
    "images": f"{PREPARED_DIR}/images.parquet",
    "texts": f"{PREPARED_DIR}/texts.parquet",
    "qrels": f"{PREPARED_DIR}/qrels.parquet",
    "candidates": f"{PREPARED_DIR}/candidates.parquet",
    "meta": f"{PREPARED_DIR}/benchmark.json",
}
BENCHMARK_META = PREPARED_FILES["meta"]
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
# One benchmark's decoded pixels, a folder per geometry (vlbench.embedding.pixel_cache).
PIXEL_CACHE_FOLDER = "results/pixels/{benchmark}"
# Written by a failed run beside the tables it did not update (vlbench.planning.failures); the
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
FEWSHOT_METRICS = "results/metrics/{model}/{benchmark}/fewshot.csv"
TIMINGS_DIR = "results/timings"
PREPARE_TIMINGS = TIMINGS_DIR + "/prepare_benchmark/{benchmark}.tsv"
FEWSHOT_TIMINGS = TIMINGS_DIR + "/fewshot/{model}/{benchmark}.tsv"
GATHER_TIMINGS = TIMINGS_DIR + "/gather_embeddings/{model}/{benchmark}.tsv"
EVALUATE_TIMINGS = TIMINGS_DIR + "/evaluate/{model}/{benchmark}.tsv"
# A zero-shot benchmark's folds (which images train each fold of a classifier: the few-shot
# evaluation or a probe; one file per benchmark, shared by every model) and a model's probe
# metric rows.
PROBE_CLASSIFIERS = ("linear", "logistic")
FOLD_CLASSIFIERS = ("fewshot", *PROBE_CLASSIFIERS)
FOLDS = "results/folds/{benchmark}/{classifier}.parquet"
PROBE_METRICS = "results/metrics/{model}/{benchmark}/probe_{classifier}.csv"
PROBE_TIMINGS = TIMINGS_DIR + "/probe/{model}/{benchmark}/{classifier}.tsv"


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


# Stage 6: the tables job's files, then one benchmark's table, plots and provenance, the paper
# tables and their summary, the exports and the leaderboard.
TABLES_DIR = "results/tables"
METRICS_CSV = f"{TABLES_DIR}/metrics.csv"
METRICS_FULL = f"{TABLES_DIR}/metrics_full.csv"
STANDINGS_CSV = f"{TABLES_DIR}/standings.csv"
NOT_RUN_CSV = f"{TABLES_DIR}/not_run.csv"
PAIRED_TESTS = f"{TABLES_DIR}/paired_tests.csv"
BENCHMARK_TABLE = TABLES_DIR + "/{benchmark}.{extension}"
COVERAGE_MD = f"{TABLES_DIR}/coverage.md"
FRONT_PAGE = f"{TABLES_DIR}/front_page.rst"
# A paper table's files: the paper_table rule's output name -> the file's extension.
PAPER_TABLE_FILES = {
    "markdown": "md",
    "csv": "csv",
    "latex": "tex",
    "html": "html",
    "rst": "rst",
    "coverage": "coverage.json",
}
PAPER_TABLE = TABLES_DIR + "/paper/{table}.{extension}"
BENCHMARK_PLOTS = ("recall_at_k", "model_bars")
PLOT = "results/plots/{benchmark}/{plot}.png"
EXAMPLE_PLOT = "results/plots/{benchmark}/examples/{model}/{direction}.png"
PROVENANCE = "results/provenance/{benchmark}.{extension}"
MTEB_DIR = "results/mteb"
CLIP_BENCHMARK_DIR = "results/clip_benchmark"
LEADERBOARD = "results/leaderboard.html"


def benchmark_table(benchmark: str, extension: str) -> str:
    """A benchmark's metrics table (`md` from the tables job, `html` from its own job)."""
    return BENCHMARK_TABLE.format(benchmark=benchmark, extension=extension)


def paper_table_file(table: str, name: str) -> str:
    """One file of a paper table, by its output name in PAPER_TABLE_FILES."""
    return PAPER_TABLE.format(table=table, extension=PAPER_TABLE_FILES[name])


def plot_file(benchmark: str, plot: str) -> str:
    """One of a benchmark's BENCHMARK_PLOTS."""
    return PLOT.format(benchmark=benchmark, plot=plot)


def provenance_file(benchmark: str, extension: str) -> str:
    """A benchmark's provenance page (`csv` or `html`)."""
    return PROVENANCE.format(benchmark=benchmark, extension=extension)
