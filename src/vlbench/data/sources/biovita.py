"""BioVITA in the MTEB layout: corpus / queries / qrels / top_ranked configs per subset.

Two hub repositories share the layout and differ in which side queries:

- `biovita` (myang333/BioVITAI2TRetrieval): the queries are images, the corpus the bare taxon
  names (`{subset}-queries`: image, id, correct_taxon, candidate_taxa; `{subset}-corpus`: id,
  text, taxon);
- `biovita_t2i` (myang333/BioVITAT2IRetrieval): the queries are the taxon names, the corpus the
  images (`{subset}-queries`: text, id, correct_taxon, candidate_taxa; `{subset}-corpus`: id,
  image, taxon).

Both: `{subset}-qrels` (query-id, corpus-id, score) and `{subset}-top_ranked` (query-id,
corpus-ids: every entry of the query's candidate taxa). Layout as mteb reads it
(`mteb/abstasks/retrieval_dataset_loaders.py`, configs `{subset}-corpus` ...) for the tasks
`BioVITAI2TReranking` / `BioVITAT2IReranking` of mteb 2.26.24
(`mteb/tasks/reranking/eng/biovita.py`, whose scorer reads `queries.id`, `candidate_taxa`,
`correct_taxon` and `corpus.id`, `taxon`). The T2I dataset card was not found; its columns are
those of the construction script that pushed it (corpus = the image index with id, image,
taxon; queries = the text index's `text` with id, correct_taxon, candidate_taxa), and a file
lacking one of them fails with the columns it has.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from vlbench.data.canonical import IMAGE_BATCH_ROWS, open_parquet, read_parquet
from vlbench.data.hub_layout import split_files, split_patterns
from vlbench.data.sources.hf_parquet import (
    check_columns,
    check_image_struct,
    text_value,
)
from vlbench.data.sources.records import Candidates, ImageRecord, SourceData, image_values
from vlbench.errors import VlbenchError

SUBSETS = ("unseen_species", "unseen_genus")
LINKS = {
    "qrels": ("query-id", "corpus-id", "score"),
    "top_ranked": ("query-id", "corpus-ids"),
}
# Query side -> the columns of the corpus and queries configs.
PARTS = {
    "image": {
        **LINKS,
        "corpus": ("id", "text", "taxon"),
        "queries": ("image", "id", "correct_taxon", "candidate_taxa"),
    },
    "text": {
        **LINKS,
        "corpus": ("id", "image", "taxon"),
        "queries": ("text", "id", "correct_taxon", "candidate_taxa"),
    },
}


def _subset(source: dict[str, Any], where: str) -> str:
    subset = source.get("subset")
    if subset not in SUBSETS:
        raise VlbenchError(f"{where}.subset must be one of {', '.join(SUBSETS)} (got {subset!r})")
    return subset


class _Repo:
    """The four configs of one subset of one BioVITA repository."""

    def __init__(self, root: Path, source: dict[str, Any], query_side: str, where: str) -> None:
        self.root, self.where = root, where
        self.subset = _subset(source, where)
        self.split = source.get("split", "test")
        self.columns = PARTS[query_side]

    def files(self, part: str) -> list[Path]:
        """The part's parquet files, each checked for the part's columns."""
        files = split_files(self.root, self.split, f"{self.subset}-{part}")
        for path in files:
            check_columns(
                path, pq.read_schema(path), self.columns[part], f"BioVITA {self.subset}-{part}"
            )
        return files

    def rows(self, part: str, columns: tuple[str, ...]) -> list[tuple[Path, list[dict]]]:
        """(file, rows) of a part, reading only `columns`."""
        return [
            (path, read_parquet(path, columns=list(columns)).to_pylist())
            for path in self.files(part)
        ]

    def ranked(self) -> dict[str, list[str]]:
        """query id -> every corpus id of its candidate taxa (the top_ranked config)."""
        return {
            str(row["query-id"]): [str(c) for c in row["corpus-ids"]]
            for _, rows in self.rows("top_ranked", LINKS["top_ranked"])
            for row in rows
        }

    def qrels(self) -> list[tuple[str, str, int]]:
        """(query id, corpus id, score) of every judgement."""
        return [
            (str(row["query-id"]), str(row["corpus-id"]), int(row["score"]))
            for _, rows in self.rows("qrels", LINKS["qrels"])
            for row in rows
        ]


def _query_candidates(
    repo: _Repo, query_modality: str, queries: list[dict], taxon_of: dict[str, str]
) -> tuple[list[Candidates], dict[str, int]]:
    """Each query's candidate entries (top_ranked) in its candidate-taxa order, and counts of
    queries whose lists disagree with their taxa (recorded in benchmark.json)."""
    ranked = repo.ranked()
    candidates: list[Candidates] = []
    mismatched = absent = 0
    for row in queries:
        query_id = str(row["id"])
        if query_id not in ranked:
            raise VlbenchError(f"{repo.where}: query {query_id!r} has no top_ranked candidate list")
        taxa = list(row["candidate_taxa"] or [])
        if not taxa:
            raise VlbenchError(f"{repo.where}: query {query_id!r} has no candidate_taxa")
        absent += row["correct_taxon"] not in taxa
        mismatched += not {taxon_of.get(cid) for cid in ranked[query_id]} <= set(taxa)
        candidates.append(Candidates(query_modality, query_id, ranked[query_id], taxa))
    counts = {
        "n_queries_with_candidates_outside_their_taxa": mismatched,
        "n_queries_whose_correct_taxon_is_not_a_candidate": absent,
    }
    return candidates, counts


def _images(files: list[Path], id_column: str, group_column: str) -> Iterator[ImageRecord]:
    """The images of a config, streamed in file order, grouped by their taxon column."""
    for path in files:
        for batch in open_parquet(path).iter_batches(
            batch_size=IMAGE_BATCH_ROWS, columns=["image", id_column, group_column]
        ):
            for image, item_id, taxon in zip(
                image_values(batch.column("image")),
                batch.column(id_column).to_pylist(),
                batch.column(group_column).to_pylist(),
                strict=True,
            ):
                yield ImageRecord(str(item_id), image, taxon, str(path))


def load(root: Path, source: dict[str, Any], benchmark: dict[str, Any], where: str) -> SourceData:
    """Image -> text: texts are the corpus (bare taxon names, group = taxon); images the queries."""
    repo = _Repo(root, source, "image", where)
    texts = [
        (str(r["id"]), text_value(r["text"], path, "text", number, "corpus text"), r["taxon"])
        for path, rows in repo.rows("corpus", PARTS["image"]["corpus"])
        for number, r in enumerate(rows)
    ]
    query_files = repo.files("queries")
    for path in query_files:
        check_image_struct(path, pq.read_schema(path), "image")
    queries = [
        row
        for path in query_files
        for row in read_parquet(path, columns=["id", "correct_taxon", "candidate_taxa"]).to_pylist()
    ]
    candidates, counts = _query_candidates(
        repo, "image", queries, {text_id: taxon for text_id, _, taxon in texts}
    )
    qrels = repo.qrels()
    return SourceData(_images(query_files, "id", "correct_taxon"), texts, qrels, candidates, counts)


def load_t2i(
    root: Path, source: dict[str, Any], benchmark: dict[str, Any], where: str
) -> SourceData:
    """Text -> image: texts are the queries (taxon names, group = the correct taxon); images the
    corpus (group = taxon)."""
    repo = _Repo(root, source, "text", where)
    corpus_files = repo.files("corpus")
    for path in corpus_files:
        check_image_struct(path, pq.read_schema(path), "image")
    taxon_of = {
        str(row["id"]): row["taxon"]
        for path in corpus_files
        for row in read_parquet(path, columns=["id", "taxon"]).to_pylist()
    }
    queries, texts = [], []
    for path, rows in repo.rows("queries", PARTS["text"]["queries"]):
        for number, row in enumerate(rows):
            text = text_value(row["text"], path, "text", number, "query text")
            texts.append((str(row["id"]), text, row["correct_taxon"]))
            queries.append(row)
    candidates, counts = _query_candidates(repo, "text", queries, taxon_of)
    # Canonical judgements are (image id, text id, relevance): the corpus entry is the image.
    qrels = [(corpus_id, query_id, score) for query_id, corpus_id, score in repo.qrels()]
    return SourceData(_images(corpus_files, "id", "taxon"), texts, qrels, candidates, counts)


def hub_patterns(source: dict[str, Any]) -> Any:
    """The four configs of the subset, as the card declares them."""
    subset, split = source.get("subset"), source.get("split", "test")
    return lambda card_dir: [
        pattern
        for part in ("corpus", "queries", "qrels", "top_ranked")
        for pattern in split_patterns(card_dir, split, f"{subset}-{part}")
    ]
