"""INQUIRE-Rerank: one parquet row per (query, candidate image) with a 0/1 relevance label."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from vlbench.data.canonical import IMAGE_BATCH_ROWS, open_parquet, read_parquet
from vlbench.data.hub_layout import split_files
from vlbench.data.sources.hf_parquet import (
    check_columns,
    check_image_struct,
    hub_patterns,
    text_value,
)
from vlbench.data.sources.records import Candidates, ImageRecord, SourceData, image_values
from vlbench.errors import VlbenchError

COLUMNS = ("image", "query", "relevant", "inat24_image_id", "supercategory")

__all__ = ["hub_patterns", "load"]


def load(root: Path, source: dict[str, Any], benchmark: dict[str, Any], where: str) -> SourceData:
    """Texts are the queries (group = supercategory); images are the union of all candidates."""
    split = source.get("split", "test")
    files = split_files(root, split, source.get("config", "default"))
    for path in files:
        schema = pq.read_schema(path)
        check_columns(path, schema, COLUMNS, "INQUIRE-Rerank")
        check_image_struct(path, schema, "image")
    query_ids: dict[str, str] = {}
    supercategory: dict[str, str] = {}
    lists: dict[str, list[str]] = {}
    qrels: list[tuple[str, str, int]] = []
    for path in files:
        rows = read_parquet(path, columns=list(COLUMNS[1:])).to_pylist()
        for number, row in enumerate(rows):
            query = text_value(row["query"], path, "query", number, "query")
            query_id = query_ids.setdefault(query, f"q{len(query_ids):04d}")
            if supercategory.setdefault(query_id, row["supercategory"]) != row["supercategory"]:
                raise VlbenchError(f"{path}: row {number}: query {query!r} changes supercategory")
            image_id = str(row["inat24_image_id"])
            lists.setdefault(query_id, []).append(image_id)
            relevant = int(row["relevant"])
            if relevant not in (0, 1):
                raise VlbenchError(f"{path}: row {number}: relevant must be 0 or 1, got {relevant}")
            qrels.append((image_id, query_id, relevant))
    per_query = source.get("expected", {}).get("candidates_per_query")
    for query_id, candidates in lists.items():
        if per_query is not None and len(candidates) != per_query:
            raise VlbenchError(
                f"{where}: query {query_id} has {len(candidates)} candidates, expected {per_query}"
            )
    texts = [(query_id, query, supercategory[query_id]) for query, query_id in query_ids.items()]
    candidates = [Candidates("text", query_id, ids) for query_id, ids in lists.items()]

    def images() -> Iterator[ImageRecord]:
        seen: set[str] = set()
        for path in files:
            parquet = open_parquet(path)
            for batch in parquet.iter_batches(
                batch_size=IMAGE_BATCH_ROWS, columns=["image", "inat24_image_id"]
            ):
                for image, image_id in zip(
                    image_values(batch.column("image")),
                    batch.column("inat24_image_id").to_pylist(),
                    strict=True,
                ):
                    if str(image_id) not in seen:
                        seen.add(str(image_id))
                        yield ImageRecord(str(image_id), image, None, str(path))

    info = {"n_queries": len(texts), "query_ids": "q<NNNN> in order of first appearance"}
    return SourceData(images(), texts, qrels, candidates, info)
