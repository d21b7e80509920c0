"""Identical texts, identical embeddings, exact ties: one workflow run over every protocol whose
gallery holds texts, on miniature sources in the real layouts with duplicated texts.

Default settings except a small `embedding.shard_size` (copies of a text land in other shard
jobs) and a `batch_size` that leaves batches of different sizes. The model has a 512-wide text
tower: wide enough that a text's embedding depends, in its last bits, on the batch it is encoded
in (as for real CLIP towers), so a copy encoded apart from its first occurrence would differ.

For each benchmark the test checks, from the workflow's own outputs:

1. every copy of a text has a bitwise-identical row in the gathered text matrix (and distinct
   texts have distinct rows);
2. the written ranks and tie counts equal those recomputed here by brute force: float32 dot
   products of the gathered rows (as the rank job scores; zero-shot against re-normalised mean
   prompt vectors, taxa by the max over their candidate entries), each a function of its two
   vectors only, so identical rows score identically wherever they sit in the gallery; each
   query's gallery ordered by a stable argsort of the negated scores (the reference scripts'
   order, which the `index` tie policy documents); tie count = the other items scoring exactly
   the relevant item's score;
3. the tie counts, and the number of tied queries in the metric files, equal what the
   duplicated texts imply, derived from the text strings alone.

INQUIRE-Rerank (`rerank`) is not here: its texts are the queries, each identified by its text
(rows with the same query string are one query), so it cannot hold two copies of a text, and
its gallery holds images only. Zero-shot cannot hold two copies either: a class is its text, as
in the reference (two species written alike are one class); its test checks that merge.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fixtures_sources import (
    BIOVITA_FEATURES,
    BIOVITA_SCHEMAS,
    biovita_subset,
    card,
    write_karpathy,
    write_parquet,
    write_rare_species_repo,
)
from workflow_helpers import TINY_MODEL_CONFIG, run_workflow, write_config

from vlbench.data.synthetic import write_synthetic_biomedflickr

MODEL = "wide"
# Shards of 36 rows in batches of 7, 7, 7, 7, 7 and 1 (fewer where a shard repeats texts); 36
# does not divide the 80 prompts of a class, so the twin classes' prompts meet other batches.
SHARD_SIZE = 36
BATCH_SIZE = 7

# benchmark -> (protocol, directions)
BENCHMARKS = {
    "paired": ("paired", ("image_to_text", "text_to_image")),
    "multi": ("multi_positive", ("image_to_text", "text_to_image")),
    "taxa": ("taxon_candidates", ("image_to_text",)),
}


def caption(number: int) -> str:
    """Captions of varied token lengths (the trimmed encoder groups a batch by length)."""
    return f"caption {number} " + "of a stained section " * (number % 5)


def duplicated(strings: list[str], copies: int, seed: int, protect: int = 0) -> list[str]:
    """`strings` with `copies` entries (none of the first `protect`) replaced by a copy of an
    earlier entry, spread over the whole list (so over shards and batches)."""
    rng = np.random.default_rng(seed)
    out = list(strings)
    for row in sorted(rng.choice(np.arange(protect, len(out)), size=copies, replace=False)):
        out[row] = out[int(rng.integers(0, row))]
    return out


def write_paired(root: Path) -> None:
    """BioMedFlickr hub layout, 48 pairs, 15 captions (31%) copies of earlier ones."""
    write_synthetic_biomedflickr(root, pairs=48, seed=3)
    (path,) = (root / "data").glob("*.parquet")
    table = pq.read_table(path)
    captions = duplicated([caption(n) for n in range(48)], copies=15, seed=1, protect=4)
    column = table.schema.get_field_index("caption")
    table = table.set_column(column, table.schema.field(column), pa.array(captions))
    pq.write_table(table, path, row_group_size=64)


def write_multi(root: Path) -> None:
    """Karpathy JSON layout, 11 test images x 5 captions, 16 captions (29%) copies of others
    (of other images' captions, or of the same image's, as COCO has)."""
    document = write_karpathy(root, per_split={"test": 11})
    sentences = [s for entry in document["images"] for s in entry["sentences"]]
    raws = duplicated([caption(n + 100) for n in range(len(sentences))], 16, seed=2, protect=3)
    for sentence, raw in zip(sentences, raws, strict=True):
        sentence["raw"] = raw
    (root / "dataset_flickr30k.json").write_text(json.dumps(document), encoding="utf-8")


def write_taxa(root: Path, n_queries: int = 24) -> None:
    """MTEB BioVITAI2TRetrieval layout (subset unseen_species). Each taxon has its own corpus
    entry plus three texts shared with the other species of its genus, and most queries'
    candidate taxa include that sibling: where a shared text scores highest for both, the
    two taxa tie."""
    subset = "unseen_species"
    rows = biovita_subset(subset, n_queries, seed=5)
    corpus = list(rows["corpus"])
    # The shared texts of every first species, then those of every second one: most copies of
    # a text land in another shard.
    for entry in sorted(rows["corpus"], key=lambda entry: entry["taxon"].split()[1]):
        genus = entry["taxon"].split()[0]
        for k, text in enumerate(
            (f"a {genus}", f"a {genus} seen in the wild", f"a photo of a {genus} at dusk")
        ):
            corpus.append({"id": f"{entry['id']}-shared{k}", "text": text, "taxon": entry["taxon"]})
    taxa = list(dict.fromkeys(row["taxon"] for row in corpus))
    rng = np.random.default_rng(7)
    qrels, ranked = [], []
    for q, query in enumerate(rows["queries"]):
        correct = query["correct_taxon"]
        genus, epithet = correct.split()
        sibling = f"{genus} sp{1 - int(epithet[-1])}"
        others = [t for t in taxa if t not in (correct, sibling)]
        chosen = [correct, sibling, *rng.choice(others, size=2, replace=False).tolist()]
        order = [chosen[i] for i in rng.permutation(len(chosen))]
        if q % 4 == 0:  # some queries keep the sibling out of their candidates
            order = [t for t in order if t != sibling]
        query["candidate_taxa"] = order
        for entry in corpus:
            if entry["taxon"] == correct:
                qrels.append({"query-id": query["id"], "corpus-id": entry["id"], "score": 1})
        ranked.append(
            {
                "query-id": query["id"],
                "corpus-ids": [e["id"] for e in corpus if e["taxon"] in order],
            }
        )
    parts = {"corpus": corpus, "queries": rows["queries"], "qrels": qrels, "top_ranked": ranked}
    configs = []
    for part, part_rows in parts.items():
        name = f"{subset}-{part}"
        configs.append((name, [("test", f"{name}/test-*")]))
        table = pa.Table.from_pylist(part_rows, schema=BIOVITA_SCHEMAS[part])
        write_parquet(root / name / "test-00000-of-00001.parquet", table, BIOVITA_FEATURES[part])
    (root / "README.md").write_text(card(configs, "tags:\n- mteb"), encoding="utf-8")


# Two species share a common name: with text_type `com` they are one class, "rose".
SPECIES = [
    ("Plantae", "Tracheophyta", "Magnoliopsida", "Rosales", "Rosaceae", "Rosa", "canina", "rose"),
    ("Animalia", "Chordata", "Mammalia", "Carnivora", "Felidae", "Panthera", "leo", "lion"),
    ("Plantae", "Tracheophyta", "Magnoliopsida", "Rosales", "Rosaceae", "Rosa", "gallica", "rose"),
]


def write_zeroshot(root: Path, per_class: int = 3) -> None:
    """Rare Species' hub layout: `metadata.csv` (file_name + catalogue columns) + dataset/."""
    write_rare_species_repo(root, per_class, seed=8, species=SPECIES)


def wide_text_model(directory: Path) -> dict[str, Any]:
    """The tiny architecture with a 512-wide, one-layer text tower, random seeded weights."""
    config = json.loads(TINY_MODEL_CONFIG.read_text(encoding="utf-8"))
    config["text_cfg"].update(width=512, heads=8, layers=1)
    path = directory / "vlbench-wide-text.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return {"name": "vlbench-wide-text", "model_config": str(path), "random_init_seed": 0}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = tmp_path_factory.mktemp("duplicates")
    sources = workdir / "sources"
    write_paired(sources / "paired")
    write_multi(sources / "multi")
    write_taxa(sources / "taxa")
    write_zeroshot(sources / "zeroshot")
    config = {
        "models": {MODEL: wide_text_model(workdir)},
        "benchmarks": {
            "paired": {"protocol": "paired", "source": {"path": str(sources / "paired")}},
            "multi": {
                "protocol": "multi_positive",
                "source": {
                    "path": str(sources / "multi"),
                    "format": "karpathy_json",
                    "annotations": "dataset_flickr30k.json",
                    "images": "images",
                    "subset": "test",
                },
            },
            "taxa": {
                "protocol": "taxon_candidates",
                "source": {"path": str(sources / "taxa"), "subset": "unseen_species"},
            },
            "zeroshot": {
                "protocol": "zeroshot",
                "text_type": "com",
                "source": {
                    "path": str(sources / "zeroshot"),
                    "columns": {"file": "file_name", "common": "common"},
                },
            },
        },
        "embedding": {"shard_size": SHARD_SIZE, "batch_size": BATCH_SIZE},
    }
    configfile = write_config(workdir, config)
    targets = [
        f"results/metrics/{MODEL}/{benchmark}/{direction}.csv"
        for benchmark, (_, directions) in BENCHMARKS.items()
        for direction in directions
    ] + [f"results/metrics/{MODEL}/zeroshot/image_to_text.csv"]
    run_workflow(workdir, configfile, *targets, "--cores", "2")
    return workdir


class Run:
    """The gathered embeddings and canonical data of one benchmark of the finished run."""

    def __init__(self, workdir: Path, benchmark: str) -> None:
        self.workdir = workdir
        self.benchmark = benchmark
        data = workdir / "results" / "data" / benchmark
        self.texts = pl.read_parquet(data / "texts.parquet")
        self.images = pl.read_parquet(data / "images.parquet", columns=["image_id", "group"])
        self.qrels = pl.read_parquet(data / "qrels.parquet")
        candidates = data / "candidates.parquet"
        self.candidates = pl.read_parquet(candidates) if candidates.is_file() else None
        self.vectors, self.ids = {}, {}
        for modality in ("image", "text"):
            base = workdir / "results" / "embeddings" / MODEL / benchmark / modality
            self.vectors[modality] = np.load(f"{base}.npy")
            self.ids[modality] = pl.read_parquet(f"{base}.ids.parquet")["id"].to_list()
        text_of = dict(zip(self.texts["text_id"], self.texts["text"], strict=True))
        self.text_strings = [text_of[item] for item in self.ids["text"]]

    def position(self, modality: str) -> dict[str, int]:
        return {item: pos for pos, item in enumerate(self.ids[modality])}

    def ranks(self, direction: str) -> pl.DataFrame:
        path = self.workdir / "results" / "ranks" / MODEL / self.benchmark / f"{direction}.parquet"
        return pl.read_parquet(path).select("query_id", "item_id", "rank", "n_tied")

    def metrics(self, direction: str) -> pl.DataFrame:
        path = self.workdir / "results" / "metrics" / MODEL / self.benchmark / f"{direction}.csv"
        return pl.read_csv(path)

    def provenance(self) -> dict[str, Any]:
        base = self.workdir / "results" / "embeddings" / MODEL / self.benchmark / "text.json"
        return json.loads(base.read_text(encoding="utf-8"))


def scores_of(queries: np.ndarray, gallery: np.ndarray) -> np.ndarray:
    """float32 dot products of every query with every gallery row, each a function of its two
    vectors only: taken on the distinct gallery rows, then given to every copy. (A BLAS matrix
    product may round a column differently by where it falls in the kernel's tiles.)"""
    _, first, inverse = np.unique(
        gallery.view(np.uint32), axis=0, return_index=True, return_inverse=True
    )
    return (queries @ gallery[first].T)[:, inverse.ravel()]


def stable_rank(scores: np.ndarray, own: int) -> tuple[int, int]:
    """1-based position of `own` when the row is sorted by descending score, ties kept in
    gallery order (stable argsort of the negated scores); and how many others tie with it."""
    order = np.argsort(-scores, kind="stable")
    rank = int(np.flatnonzero(order == own)[0]) + 1
    return rank, int(np.count_nonzero(scores == scores[own])) - 1


def copies(strings: list[str]) -> dict[str, int]:
    """How many times each string occurs."""
    counts: dict[str, int] = {}
    for text in strings:
        counts[text] = counts.get(text, 0) + 1
    return counts


def frame(rows: list[tuple[str, str, int, int]]) -> pl.DataFrame:
    schema = {"query_id": pl.String, "item_id": pl.String, "rank": pl.Int64, "n_tied": pl.Int64}
    return pl.DataFrame(rows, schema=schema, orient="row").sort("query_id", "item_id")


def assert_same_ranks(written: pl.DataFrame, expected: pl.DataFrame, label: object) -> None:
    """The same (query, item) pairs, ranks and tie counts; else fail listing those that differ."""
    joined = written.join(
        expected, on=["query_id", "item_id"], how="full", suffix="_expected", coalesce=True
    )
    wrong = joined.filter(
        pl.col("rank").ne_missing(pl.col("rank_expected"))
        | pl.col("n_tied").ne_missing(pl.col("n_tied_expected"))
    )
    with pl.Config(tbl_rows=20, tbl_cols=8, fmt_str_lengths=40):
        assert wrong.is_empty(), f"{label}: {wrong.height} of {joined.height} pairs differ\n{wrong}"


def tied_queries(ranks: pl.DataFrame) -> int:
    """Queries whose best-ranked relevant item ties (the metrics' decisive item)."""
    best = ranks.sort("rank").group_by("query_id", maintain_order=True).first()
    return int((best["n_tied"] > 0).sum())


# Metrics whose outcome depends on every relevant item's rank (config/README.md, docs/score.md):
# their tied queries are those with any tied relevant item, the others' those whose best one ties.
EVERY_ITEM_METRICS = ("true_recall", "ndcg", "average_precision")


def assert_metric_ties(run: Run, direction: str, ranks: pl.DataFrame) -> None:
    """`n_tied_queries` of every metric row equals the tied queries of the written ranks."""
    metrics = run.metrics(direction)
    assert "n_tied_queries" in metrics.columns, metrics.columns
    anywhere = ranks.filter(pl.col("n_tied") > 0)["query_id"].n_unique()
    for metric, n_tied in metrics.select("metric", "n_tied_queries").iter_rows():
        expected = anywhere if metric in EVERY_ITEM_METRICS else tied_queries(ranks)
        assert n_tied == expected, (run.benchmark, direction, metric)


# --- 1. identical texts, identical rows -------------------------------------------------------


@pytest.mark.parametrize("benchmark", list(BENCHMARKS))
def test_every_copy_of_a_text_has_a_bitwise_identical_row(finished: Path, benchmark: str) -> None:
    run = Run(finished, benchmark)
    matrix = run.vectors["text"]
    assert matrix.dtype == np.float32 and len(matrix) == len(run.text_strings)
    bits = matrix.view(np.uint32)
    first: dict[str, int] = {}
    for row, text in enumerate(run.text_strings):
        row0 = first.setdefault(text, row)
        assert np.array_equal(bits[row], bits[row0]), (benchmark, row, row0, text)
    assert len(first) < len(run.text_strings), "the fixture has no duplicated texts"
    # Distinct texts, distinct rows: ties below come from the copies only.
    assert len({bits[row].tobytes() for row in first.values()}) == len(first)
    # The texts span several shard jobs, in batches of different sizes.
    assert len(run.text_strings) > SHARD_SIZE


def test_the_fixture_is_sharp(finished: Path) -> None:
    """Every benchmark has copies of a text in different shard jobs (encoded in other batches),
    and over the run such copies came out different and were unified at the gather: without
    the unification they would not tie. (Whether a given benchmark's copies differ in their last
    bits depends on the machine's kernels, so the difference is required of the run.)"""
    unified = 0
    for benchmark in BENCHMARKS:
        run = Run(finished, benchmark)
        record = run.provenance()
        shard_of = {}
        for number, shard in enumerate(record["shards"]):
            start, stop = shard["rows"]
            shard_of.update(dict.fromkeys(range(start, stop), number))
        assert len(shard_of) == len(run.text_strings), benchmark
        shards_of_text: dict[str, set[int]] = {}
        for row, text in enumerate(run.text_strings):
            shards_of_text.setdefault(text, set()).add(shard_of[row])
        assert any(len(shards) > 1 for shards in shards_of_text.values()), benchmark
        unified += record["duplicate_text_rows_unified"]
    assert unified > 0


# --- 2 and 3. ranks and ties -------------------------------------------------------------------


@pytest.mark.parametrize("benchmark", ["paired", "multi"])
def test_item_retrieval_ranks_follow_the_index_policy(finished: Path, benchmark: str) -> None:
    run = Run(finished, benchmark)
    images, texts = run.vectors["image"], run.vectors["text"]
    image_pos, text_pos = run.position("image"), run.position("text")
    relevant = run.qrels.filter(pl.col("relevance") > 0)
    count = copies(run.text_strings)
    for direction in BENCHMARKS[benchmark][1]:
        i2t = direction == "image_to_text"
        scores = scores_of(images, texts) if i2t else scores_of(texts, images)
        expected, implied = [], []
        for image_id, text_id in relevant.select("image_id", "text_id").iter_rows():
            query, item = (image_id, text_id) if i2t else (text_id, image_id)
            q = image_pos[image_id] if i2t else text_pos[text_id]
            g = text_pos[text_id] if i2t else image_pos[image_id]
            rank, n_tied = stable_rank(scores[q], g)
            expected.append((query, item, rank, n_tied))
            # Images are distinct: only a text gallery ties, with the copies of the text.
            implied.append((query, item, rank, count[run.text_strings[g]] - 1 if i2t else 0))
        written = run.ranks(direction).sort("query_id", "item_id")
        assert_same_ranks(written, frame(expected), (benchmark, direction, "brute force"))
        assert_same_ranks(written, frame(implied), (benchmark, direction, "implied ties"))
        n_tied = tied_queries(written)
        assert (n_tied > 0) == i2t, (benchmark, direction, n_tied)
        assert_metric_ties(run, direction, written)


def test_paired_tie_counts_match_the_duplicated_captions(finished: Path) -> None:
    """Every image whose caption has a copy is a tied query, and only those."""
    run = Run(finished, "paired")
    count = copies(run.text_strings)
    assert sum(n for n in count.values() if n > 1) >= 0.3 * len(run.text_strings) - 1
    implied = sum(count[text] > 1 for text in run.text_strings)
    ranks = run.ranks("image_to_text")
    assert tied_queries(ranks) == implied
    assert_metric_ties(run, "image_to_text", ranks)


def test_taxon_candidate_ranks_follow_the_index_policy(finished: Path) -> None:
    run = Run(finished, "taxa")
    assert run.candidates is not None
    scores = scores_of(run.vectors["image"], run.vectors["text"])
    scores64 = run.vectors["image"].astype(np.float64) @ run.vectors["text"].T.astype(np.float64)
    image_pos, text_pos = run.position("image"), run.position("text")
    truth = dict(run.images.select("image_id", "group").iter_rows())
    text_group = dict(run.texts.select("text_id", "group").iter_rows())
    expected, implied = [], []
    for query, candidate_ids, taxa in (
        run.candidates.filter(pl.col("query_modality") == "image")
        .select("query_id", "candidate_ids", "candidate_groups")
        .iter_rows()
    ):
        q = image_pos[query]
        pooled = np.full(len(taxa), -np.inf, dtype=np.float32)
        best_text = [""] * len(taxa)
        best64 = np.full(len(taxa), -np.inf)
        for item in candidate_ids:
            g = text_pos[item]
            if text_group[item] not in taxa:
                continue
            slot = taxa.index(text_group[item])
            pooled[slot] = max(pooled[slot], scores[q, g])
            if scores64[q, g] > best64[slot]:
                best64[slot], best_text[slot] = scores64[q, g], run.text_strings[g]
        own = taxa.index(truth[query])
        rank, n_tied = stable_rank(pooled, own)
        expected.append((query, truth[query], rank, n_tied))
        # A taxon ties with the query's own exactly when its best entry is the same text.
        shared = sum(text == best_text[own] for text in best_text) - 1
        implied.append((query, truth[query], rank, shared))
    written = run.ranks("image_to_text").sort("query_id", "item_id")
    assert_same_ranks(written, frame(expected), "brute force")
    assert_same_ranks(written, frame(implied), "implied ties")
    n_tied = tied_queries(written)
    assert n_tied >= 2, "no tied query: the fixture does not exercise the shared texts"
    assert_metric_ties(run, "image_to_text", written)


def test_zeroshot_species_written_alike_are_one_class_without_ties(finished: Path) -> None:
    """Under `com` the two roses are one class (the reference's `data['class'].unique()`): its
    80 prompts appear once, its 6 images are one class, and no image ties with another class."""
    run = Run(finished, "zeroshot")
    groups = run.texts["group"].to_list()
    assert list(dict.fromkeys(groups)) == ["rose", "lion"]
    assert len(run.text_strings) == len(set(run.text_strings)) == 2 * 80
    truth = dict(run.images.select("image_id", "group").iter_rows())
    assert sorted(truth.values()) == ["lion"] * 3 + ["rose"] * 6
    written = run.ranks("image_to_text")
    assert tied_queries(written) == 0
