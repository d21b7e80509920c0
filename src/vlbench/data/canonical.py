"""The canonical benchmark layout every protocol is prepared into, and its readers.

A prepared benchmark is a directory ``results/data/<benchmark>/`` with:

- ``images.parquet``: ``image_id`` (string, unique), ``image`` (encoded bytes, stored as is:
  no parquet compression or dictionary), ``group`` (string or null: a class or taxon the image
  belongs to)
- ``texts.parquet``: ``text_id`` (string, unique), ``text`` (string, exactly what the model
  tokenizes), ``group`` (string or null: the class, taxon or query group of the text)
- ``qrels.parquet``: ``image_id``, ``text_id``, ``relevance`` (int32; > 0 relevant, 0 judged
  not relevant): item-level judgements, read in both directions
- ``benchmark.json``: protocol, source, revision, split/subset and row counts

Protocols use these as follows:

- ``paired`` / ``multi_positive`` (BioMedFlickr, Cornell Bird, PlantID, Flickr30k, COCO): qrels
  link each image to its caption(s); the gallery is the whole other modality.
- ``taxon_candidates`` (BioVITA): texts are corpus entries with ``group`` = taxon, images are
  queries with ``group`` = correct taxon; ``candidates.parquet`` holds each query's candidate
  list (see below); taxa are scored by the max over their corpus entries.
- ``zeroshot`` (classification): texts are the prompts (class text x template) with ``group`` =
  class; images carry ``group`` = true class; qrels is empty. The classifier of a class is the
  re-normalised mean of its prompts' normalised embeddings.
- ``rerank`` (INQUIRE-Rerank): texts are queries with ``group`` = supercategory; qrels carry
  the relevance labels; ``candidates.parquet`` restricts each text query to its candidates.

- ``candidates.parquet`` (only for protocols that restrict a query's gallery):
  ``query_modality`` ("image" or "text"), ``query_id``, ``candidate_ids`` (list of gallery ids,
  ordered), ``candidate_groups`` (list of groups in the reference tie-break order, or null).
  The prepare step writes it for every benchmark; zero rows means no query is restricted.

- In ``paired`` / ``multi_positive``, an item with no judgement at all is a distractor: it sits
  in the gallery but is not scored as a query (the large-pool Flickr30k/COCO setting, where the
  gallery is train+val+test and only the test items are judged).
- ``benchmark.json`` also records ``subset`` (the split when a source has no subsets),
  ``n_source_images`` and the ``skipped_images`` left out under ``image_policy: skip``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from vlbench.errors import VlbenchError

IMAGES_SCHEMA = pa.schema(
    [("image_id", pa.string()), ("image", pa.binary()), ("group", pa.string())]
)
TEXTS_SCHEMA = pa.schema([("text_id", pa.string()), ("text", pa.string()), ("group", pa.string())])
QRELS_SCHEMA = pa.schema(
    [("image_id", pa.string()), ("text_id", pa.string()), ("relevance", pa.int32())]
)
CANDIDATES_SCHEMA = pa.schema(
    [
        ("query_modality", pa.string()),
        ("query_id", pa.string()),
        ("candidate_ids", pa.list_(pa.string())),
        ("candidate_groups", pa.list_(pa.string())),
    ]
)
ID_COLUMNS = {"image": "image_id", "text": "text_id"}


# Rows of encoded images turned into Python objects at once when a file is streamed: a few
# megabytes, so the buffers are reused from batch to batch instead of fresh ones faulted in.
IMAGE_BATCH_ROWS = 32


def open_parquet(path: str | Path) -> pq.ParquetFile:
    """A parquet file opened memory-mapped: its column chunks are read in place from the page
    cache, not copied into freshly allocated memory first (streaming a 424 MB images file:
    0.2 s instead of 1.3-3.1 s on a VM, where every fresh page is costly). The files read
    this way are never rewritten in place (sources are pinned, outputs replaced by rename)."""
    return pq.ParquetFile(path, memory_map=True)


def read_parquet(path: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """The table of one parquet file, all columns or `columns` (in that order).

    Not `pyarrow.parquet.read_table`: that goes through `pyarrow.dataset`, whose import pulls in
    pandas (about 0.3 s per job); each file read here is one parquet file, which
    `ParquetFile.read` reads the same way.
    """
    with open_parquet(path) as parquet:
        return parquet.read(columns=list(columns) if columns is not None else None)


def read_table(path: str | Path, schema: pa.Schema, columns: list[str] | None = None) -> pa.Table:
    """Read a parquet file and check it carries the columns of `schema`."""
    path = Path(path)
    try:
        file_schema = pq.read_schema(path)
    except FileNotFoundError as exc:
        raise VlbenchError(f"file not found: {path}") from exc
    except (pa.ArrowInvalid, OSError) as exc:
        raise VlbenchError(f"{path}: not a readable parquet file ({exc})") from exc
    wanted = columns or schema.names
    missing = [name for name in wanted if name not in file_schema.names]
    if missing:
        raise VlbenchError(
            f"{path}: missing column(s) {', '.join(missing)} (has: {', '.join(file_schema.names)})"
        )
    return read_parquet(path, columns=wanted)


def read_ids(path: str | Path, modality: str) -> np.ndarray:
    """The ids of a modality's canonical parquet, in file order."""
    column = ID_COLUMNS[modality]
    schema = IMAGES_SCHEMA if modality == "image" else TEXTS_SCHEMA
    table = read_table(path, schema, [column])
    return np.asarray(table.column(column).to_pylist(), dtype=object)


def read_qrels(path: str | Path) -> pa.Table:
    """The relevance judgements of a prepared benchmark."""
    return read_table(path, QRELS_SCHEMA)


def read_candidates(path: str | Path) -> pa.Table:
    """Each restricted query's ordered candidate list (zero rows: no query is restricted)."""
    return read_table(path, CANDIDATES_SCHEMA)
