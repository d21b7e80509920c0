"""BioVITAI2TRetrieval (MTEB layout): corpus / queries / qrels / top_ranked configs per subset."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from vlbench.data.hub_layout import split_files, split_patterns
from vlbench.data.sources.hf_parquet import (
    check_columns,
    check_image_struct,
    image_bytes,
    text_value,
)
from vlbench.data.sources.records import Candidates, ImageRecord, SourceData
from vlbench.errors import VlbenchError

SUBSETS = ("unseen_species", "unseen_genus")
PARTS = {
    "corpus": ("id", "text", "taxon"),
    "queries": ("image", "id", "correct_taxon", "candidate_taxa"),
    "qrels": ("query-id", "corpus-id", "score"),
    "top_ranked": ("query-id", "corpus-ids"),
}


def _subset(source: dict[str, Any], where: str) -> str:
    subset = source.get("subset")
    if subset not in SUBSETS:
        raise VlbenchError(f"{where}.subset must be one of {', '.join(SUBSETS)} (got {subset!r})")
    return subset


def _read_part(root: Path, subset: str, part: str, split: str, columns: tuple[str, ...]) -> Any:
    files = split_files(root, split, f"{subset}-{part}")
    for path in files:
        check_columns(path, pq.read_schema(path), PARTS[part], f"BioVITA {subset}-{part}")
    return files, [pq.read_table(path, columns=list(columns)).to_pylist() for path in files]


def load(root: Path, source: dict[str, Any], benchmark: dict[str, Any], where: str) -> SourceData:
    """Texts are the corpus (bare taxon names, group = taxon); images are the queries."""
    subset = _subset(source, where)
    split = source.get("split", "test")
    corpus_files, corpus_parts = _read_part(root, subset, "corpus", split, PARTS["corpus"])
    texts = [
        (str(r["id"]), text_value(r["text"], path, "text", number, "corpus text"), r["taxon"])
        for path, part in zip(corpus_files, corpus_parts, strict=True)
        for number, r in enumerate(part)
    ]
    _, qrel_parts = _read_part(root, subset, "qrels", split, PARTS["qrels"])
    qrels = [
        (str(r["query-id"]), str(r["corpus-id"]), int(r["score"])) for p in qrel_parts for r in p
    ]
    _, ranked_parts = _read_part(root, subset, "top_ranked", split, PARTS["top_ranked"])
    ranked = {
        str(r["query-id"]): [str(c) for c in r["corpus-ids"]] for p in ranked_parts for r in p
    }
    query_files, query_parts = _read_part(
        root, subset, "queries", split, ("id", "correct_taxon", "candidate_taxa")
    )
    for path in query_files:
        check_image_struct(path, pq.read_schema(path), "image")
    taxon_of = {text_id: taxon for text_id, _, taxon in texts}
    candidates: list[Candidates] = []
    mismatched = absent = 0
    for part in query_parts:
        for row in part:
            query_id = str(row["id"])
            if query_id not in ranked:
                raise VlbenchError(f"{where}: query {query_id!r} has no top_ranked candidate list")
            taxa = list(row["candidate_taxa"] or [])
            if not taxa:
                raise VlbenchError(f"{where}: query {query_id!r} has no candidate_taxa")
            absent += row["correct_taxon"] not in taxa
            listed = {taxon_of.get(cid) for cid in ranked[query_id]}
            mismatched += not listed <= set(taxa)
            candidates.append(Candidates("image", query_id, ranked[query_id], taxa))

    def images() -> Iterator[ImageRecord]:
        for path in query_files:
            source_file = pq.ParquetFile(path)
            for batch in source_file.iter_batches(
                batch_size=64, columns=["image", "id", "correct_taxon"]
            ):
                for image, query_id, taxon in zip(
                    batch.column("image").to_pylist(),
                    batch.column("id").to_pylist(),
                    batch.column("correct_taxon").to_pylist(),
                    strict=True,
                ):
                    yield ImageRecord(str(query_id), image_bytes(image), taxon, str(path))

    info = {
        "n_queries_with_candidates_outside_their_taxa": mismatched,
        "n_queries_whose_correct_taxon_is_not_a_candidate": absent,
    }
    return SourceData(images(), texts, qrels, candidates, info)


def hub_patterns(source: dict[str, Any]) -> Any:
    """The four configs of the subset, as the card declares them."""
    subset, split = source.get("subset"), source.get("split", "test")
    return lambda card_dir: [
        pattern for part in PARTS for pattern in split_patterns(card_dir, split, f"{subset}-{part}")
    ]
