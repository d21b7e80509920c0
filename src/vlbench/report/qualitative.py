"""Qualitative examples: for a few fixed queries, the top items the faiss index returns."""

from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
import polars as pl
import pyarrow.parquet as pq
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from PIL import Image

from vlbench.data.canonical import ID_COLUMNS
from vlbench.embedding.matrix_files import clean_hint, read_embedding_ids, require_gathered_intact
from vlbench.errors import VlbenchError
from vlbench.hashing import require_sidecar_intact
from vlbench.paths import MODALITY_FILES
from vlbench.protocols import DIRECTIONS
from vlbench.report.plots import save_figure

THUMBNAIL_PIXELS = 160
CAPTION_CHARS = 220
CORRECT_COLOUR = "#1b9e3e"


@dataclass(frozen=True)
class Example:
    """One query with its retrieved items, their scores and which of them are relevant."""

    query_id: str
    items: list[str]
    scores: list[float]
    relevant: set[str]
    best_rank: int | None


def pick_queries(query_ids: np.ndarray, judged: set[str], count: int) -> list[int]:
    """Positions of `count` judged queries spread evenly over the file order (model-independent)."""
    positions = [pos for pos, query in enumerate(query_ids) if query in judged]
    if count <= 0 or not positions:
        return []
    if count >= len(positions):
        return positions
    picks = np.linspace(0, len(positions) - 1, count).round().astype(int)
    return [positions[i] for i in picks]


def relevant_items(qrels_path: str | Path, direction: str) -> dict[str, set[str]]:
    """Relevant gallery ids per query id (relevance > 0) for one direction."""
    query_modality, gallery_modality = DIRECTIONS[direction]
    qrels = pl.read_parquet(qrels_path).filter(pl.col("relevance") > 0)
    relevant: dict[str, set[str]] = {}
    query_col, gallery_col = ID_COLUMNS[query_modality], ID_COLUMNS[gallery_modality]
    for query, item in qrels.select(query_col, gallery_col).iter_rows():
        relevant.setdefault(query, set()).add(item)
    return relevant


def best_ranks(ranks_path: str | Path | None) -> dict[str, int]:
    """The exact best rank of a relevant item per query, from the ranks parquet (if given)."""
    if ranks_path is None:
        return {}
    ranks = pl.read_parquet(ranks_path, columns=["query_id", "rank"])
    best = ranks.group_by("query_id").agg(pl.col("rank").min())
    return dict(best.iter_rows())


def search_examples(
    query_npy: str | Path,
    query_ids_path: str | Path,
    index_path: str | Path,
    gallery_ids_path: str | Path,
    relevant: dict[str, set[str]],
    ranks: dict[str, int],
    count: int,
    top: int = 5,
) -> list[Example]:
    """Search the index with the picked queries' embeddings and keep the top items, once the
    query matrix, both id files and the index match the digests recorded when they were
    written."""
    gallery_ids_path = Path(gallery_ids_path)
    gallery_npy = gallery_ids_path.with_name(gallery_ids_path.name.replace(".ids.parquet", ".npy"))
    for matrix in (query_npy, gallery_npy):
        require_gathered_intact(matrix)
    require_sidecar_intact(index_path, clean_hint(index_path))
    vectors = np.load(query_npy, mmap_mode="r", allow_pickle=False)
    query_ids, gallery_ids = (
        read_embedding_ids(query_ids_path),
        read_embedding_ids(gallery_ids_path),
    )
    if vectors.ndim != 2 or vectors.shape[0] != len(query_ids):
        raise VlbenchError(f"{query_npy}: {vectors.shape} rows do not match {query_ids_path}")
    index = faiss.read_index(str(index_path))
    if index.ntotal != len(gallery_ids):
        raise VlbenchError(
            f"{index_path}: {index.ntotal} vectors but {len(gallery_ids)} ids in {gallery_ids_path}"
        )
    picked = pick_queries(query_ids, set(relevant), count)
    if not picked:
        return []
    queries = np.ascontiguousarray(vectors[picked], dtype=np.float32)
    scores, positions = index.search(queries, min(top, index.ntotal))
    return [
        Example(
            query_id=str(query_ids[q]),
            items=[str(gallery_ids[p]) for p in row_positions if p >= 0],
            scores=[float(s) for s in row_scores],
            relevant=relevant[query_ids[q]],
            best_rank=ranks.get(str(query_ids[q])),
        )
        for q, row_scores, row_positions in zip(picked, scores, positions, strict=True)
    ]


def read_items(data_dir: str | Path, modality: str, ids: set[str]) -> dict[str, object]:
    """Image bytes or caption text of the given ids, read with a row filter."""
    id_column = ID_COLUMNS[modality]
    value_column = "image" if modality == "image" else "text"
    table = pq.read_table(
        Path(data_dir) / MODALITY_FILES[modality],
        columns=[id_column, value_column],
        filters=[(id_column, "in", sorted(ids))],
    )
    keys = table.column(id_column).to_pylist()
    return dict(zip(keys, table.column(value_column).to_pylist(), strict=True))


def _thumbnail(data: bytes) -> np.ndarray:
    """A display thumbnail; a JPEG is decoded at the smallest DCT scale still at least the
    thumbnail's size (PIL's draft mode: 1/2 to 1/8 of the work of a full decode)."""
    with Image.open(io.BytesIO(data)) as image:
        image.draft("RGB", (THUMBNAIL_PIXELS, THUMBNAIL_PIXELS))
        image = image.convert("RGB")
        image.thumbnail((THUMBNAIL_PIXELS, THUMBNAIL_PIXELS))
        return np.asarray(image)


def _caption(text: str) -> str:
    short = text if len(text) <= CAPTION_CHARS else text[: CAPTION_CHARS - 1] + "…"
    return "\n".join(textwrap.wrap(short, width=28)) or "(empty caption)"


def _draw(axis: Axes, modality: str, value: object, framed: bool) -> None:
    axis.set_xticks([])
    axis.set_yticks([])
    if modality == "image" and value is not None:
        axis.imshow(_thumbnail(value))  # type: ignore[arg-type]
    else:
        axis.text(0.03, 0.97, _caption(str(value)), va="top", ha="left", fontsize=7)
    for spine in axis.spines.values():
        spine.set_edgecolor(CORRECT_COLOUR if framed else "#999999")
        spine.set_linewidth(4 if framed else 0.5)


def render_examples(
    examples: list[Example],
    direction: str,
    data_dir: str | Path,
    title: str,
) -> Figure:
    """One row per query: the query, then its top items; relevant items framed and ticked."""
    query_modality, gallery_modality = DIRECTIONS[direction]
    if not examples:
        figure = Figure(figsize=(6, 2))
        axis = figure.subplots()
        axis.axis("off")
        axis.text(0.5, 0.5, f"{title}: no judged queries", ha="center", va="center")
        return figure
    top = max(len(example.items) for example in examples)
    queries = read_items(data_dir, query_modality, {e.query_id for e in examples})
    items = read_items(data_dir, gallery_modality, {i for e in examples for i in e.items})
    figure = Figure(figsize=(2.2 * (top + 1), 2.4 * len(examples)))
    axes = figure.subplots(len(examples), top + 1, squeeze=False)
    for axes_row, example in zip(axes, examples, strict=True):
        _draw(axes_row[0], query_modality, queries.get(example.query_id), framed=False)
        rank = "" if example.best_rank is None else f"\ncorrect at rank {example.best_rank}"
        axes_row[0].set_title(f"query {example.query_id}{rank}", fontsize=8)
        for slot, axis in enumerate(axes_row[1:]):
            if slot >= len(example.items):
                axis.axis("off")
                continue
            item = example.items[slot]
            correct = item in example.relevant
            _draw(axis, gallery_modality, items.get(item), framed=correct)
            mark = "✓ correct" if correct else ""
            axis.set_title(
                f"#{slot + 1} {item} ({example.scores[slot]:.3f}) {mark}",
                fontsize=8,
                color=CORRECT_COLOUR if correct else "black",
            )
    figure.suptitle(title)
    return figure


def write_examples(
    query_npy: str | Path,
    query_ids: str | Path,
    index_path: str | Path,
    gallery_ids: str | Path,
    qrels: str | Path,
    ranks: str | Path | None,
    data_dir: str | Path,
    direction: str,
    count: int,
    title: str,
    out_png: str | Path,
) -> int:
    """Search, render and save the examples of one model, benchmark and direction."""
    examples = search_examples(
        query_npy,
        query_ids,
        index_path,
        gallery_ids,
        relevant_items(qrels, direction),
        best_ranks(ranks),
        count,
    )
    save_figure(render_examples(examples, direction, data_dir, title), out_png)
    return len(examples)
