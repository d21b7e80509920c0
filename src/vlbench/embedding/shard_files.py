"""Embedding shards without torch: shards, the stored shards of a job, and the gather.

An embedding job cuts each modality into shards (row ranges with a digest of their content)
and stores each embedded shard in its resume folder as ``shard-XXXXX.npy`` (the matrix, float32
or float16), ``.ids.parquet`` and ``.json`` (provenance), each atomically, the provenance last: it
carries the shard's content key (which rows, by which model, how) and the digests of the two
other files (`vlbench.hashing`), so a rerun reuses a shard whose key still matches and whose
bytes are still the ones written; a damaged one is embedded again. The gather concatenates the
shards into the job's declared outputs, whose provenance records their digests too: every job
that reads a gathered matrix checks them first and stops, naming the file, on a mismatch
(`vlbench.embedding.matrix_files`, which jobs that only read matrices import).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from vlbench.atomic import atomic_path, npy_bytes, reserved_npy_memmap
from vlbench.data.canonical import IMAGE_BATCH_ROWS, open_parquet, read_parquet
from vlbench.data.decode_policy import LEGACY, policy_of_metadata
from vlbench.embedding.identity import content_key
from vlbench.embedding.matrix_files import IDS_SCHEMA, MatrixFiles, save_matrix, write_provenance
from vlbench.errors import VlbenchError
from vlbench.hashing import mismatches

LOG = logging.getLogger("vlbench")
STORAGE_DTYPES = {"float32": np.float32, "float16": np.float16}


def shard_name(index: int) -> str:
    """The file stem of shard `index`."""
    return f"shard-{index:05d}"


def shard_ranges(rows: int, shard_size: int) -> list[tuple[int, int]]:
    """Row ranges [start, stop) of consecutive shards of at most `shard_size` rows."""
    if shard_size < 1:
        raise VlbenchError(f"embedding.shard_size must be at least 1, got {shard_size}")
    return [(start, min(start + shard_size, rows)) for start in range(0, rows, shard_size)]


def _payloads(column: pa.Array) -> list[bytes | pa.Buffer]:
    """Each row's payload as bytes: a text encoded, an image's bytes as a view of the column
    (no copy), b"" where missing."""
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return [value.as_buffer() if value.is_valid else b"" for value in column]
    return [(value or "").encode() for value in column.to_pylist()]


def shard_digests(source: str | Path, ranges: Sequence[tuple[int, int]]) -> list[str]:
    """sha256 of each row range's content: every row's id and payload (the first two columns
    of a canonical images or texts parquet: encoded image bytes, or the exact text), and the
    images file's decode policy when it is not the legacy one.

    A shard whose digest is unchanged embeds to the same numbers, so a rerun can keep it.
    """
    parquet = open_parquet(source)
    id_column, payload_column = parquet.schema_arrow.names[:2]
    digests = [hashlib.sha256() for _ in ranges]
    # An images file's decode policy changes its pixels: a non-legacy one is part of the digest
    # (legacy digests stay those of files prepared before policies existed).
    policy = policy_of_metadata(parquet.schema_arrow.metadata, str(source))
    if policy != LEGACY:
        for digest in digests:
            digest.update(json.dumps({"decode": policy.as_dict()}, sort_keys=True).encode())
    row, shard = 0, 0
    columns = [id_column, payload_column]
    for batch in parquet.iter_batches(batch_size=IMAGE_BATCH_ROWS, columns=columns):
        for item_id, data in zip(
            batch.column(0).to_pylist(), _payloads(batch.column(1)), strict=True
        ):
            while row >= ranges[shard][1]:
                shard += 1
            digests[shard].update(f"{item_id}\0{len(data)}\0".encode())
            digests[shard].update(data)
            row += 1
    return [digest.hexdigest()[:24] for digest in digests]


@dataclass(frozen=True)
class Shard:
    """Rows [start, stop) of one modality's prepared parquet, their content digest, and the
    folder where an image shard's decoded pixels are cached (its benchmark's pixel-cache
    folder; None: not cached)."""

    modality: str
    source: Path
    index: int
    start: int
    stop: int
    digest: str = ""
    pixel_folder: Path | None = None

    @property
    def name(self) -> str:
        """The shard's file stem."""
        return shard_name(self.index)


def plan_shards(
    modality: str, source: str | Path, shard_size: int, pixel_folder: str | Path | None = None
) -> list[Shard]:
    """Cut a prepared parquet into shards of at most `shard_size` rows, each with its digest
    (`pixel_folder`: where the shards' decoded pixels are cached, for image shards).

    Remembered per file version within a process: a job embedding several models on one
    benchmark (embedding.jobs) reads and hashes the rows once."""
    try:
        stat = os.stat(source)
        version = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
    except OSError:
        version = None  # the planner names the unreadable file
    folder = Path(pixel_folder) if pixel_folder is not None else None
    return list(_planned_shards(modality, Path(source), shard_size, folder, version))


@functools.cache
def _planned_shards(
    modality: str,
    source: Path,
    shard_size: int,
    pixel_folder: Path | None,
    version: tuple[int, int, int] | None,
) -> tuple[Shard, ...]:
    try:
        rows = pq.ParquetFile(source).metadata.num_rows
    except (OSError, pa.ArrowInvalid) as exc:
        raise VlbenchError(f"{source}: not a readable parquet file ({exc})") from exc
    if rows == 0:
        raise VlbenchError(f"{source}: no rows to embed")
    ranges = shard_ranges(rows, shard_size)
    digests = shard_digests(source, ranges)
    return tuple(
        Shard(modality, source, index, start, stop, digest, pixel_folder)
        for index, ((start, stop), digest) in enumerate(zip(ranges, digests, strict=True))
    )


class ShardStore:
    """The stored shards of one modality of one (model, benchmark): the embedding job's resume
    folder, which no other job reads. A shard is stored under the content key of its rows and
    the model's identity (`vlbench.embedding.identity`); one whose key still matches is reused
    instead of embedded again."""

    def __init__(self, folder: str | Path, identity: dict[str, Any]) -> None:
        self.folder = Path(folder)
        self.identity = identity

    def files(self, shard: Shard) -> MatrixFiles:
        """Where a shard's matrix, ids and provenance are stored."""
        return MatrixFiles.at(self.folder / shard.name)

    def key(self, shard: Shard) -> str:
        """The content key a stored copy of `shard` must carry to be reused."""
        return content_key(shard.digest, self.identity)

    def listed(self, shard: Shard) -> dict[str, Any] | None:
        """The provenance of a stored shard with the current key, its files not checked."""
        try:
            record = json.loads(self.files(shard).provenance.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return record if record.get("content_key") == self.key(shard) else None

    def stored(self, shard: Shard) -> dict[str, Any] | None:
        """The provenance of a complete stored shard with the current key whose files still
        hold the bytes written (their digests); None otherwise (a damaged one named in the
        log)."""
        record = self.listed(shard)
        if record is None:
            return None
        damaged = mismatches(self.files(shard).data, record.get("files"))
        if damaged:
            LOG.warning("stored shard %s not reused, embedding it again", damaged[0])
            return None
        return record

    def reused(self, shard: Shard) -> dict[str, Any] | None:
        """`stored`'s record marked reused (and its line in the rule log), or None."""
        record = self.stored(shard)
        if record is None:
            return None
        log_shard(record, reused=True)
        return {**record, "reused": True}

    def save(
        self, shard: Shard, ids: Sequence[str], matrix: np.ndarray, record: dict[str, Any]
    ) -> dict[str, Any]:
        """Store a shard (ids, matrix, then its provenance with the content key); return the
        provenance. The old provenance goes first: a shard is complete only once it is back."""
        files = self.files(shard)
        files.provenance.unlink(missing_ok=True)
        return save_matrix(files, ids, matrix, {**record, "content_key": self.key(shard)})


def log_shard(record: dict[str, Any], reused: bool) -> None:
    """One line per shard in the rule log: reused, or its speed and pixel-cache use."""
    modality, (start, stop) = record["modality"], record["rows"]
    if reused:
        LOG.info("%s rows %d-%d: stored shard reused", modality, start, stop)
        return
    together = record.get("embedded_with")
    LOG.info(
        "%s rows %d-%d: %s items/s%s, pixel cache %s",
        modality,
        start,
        stop,
        record["items_per_second"],
        f" (one pass for {len(together)} models)" if together else "",
        record.get("pixel_cache", "n/a"),
    )
    if record.get("texts_at_context_limit"):
        LOG.warning(
            "%d texts fill the whole context of %s tokens: longer ones were truncated",
            record["texts_at_context_limit"],
            record.get("context_length", "the model's"),
        )


def gather_shards(
    shards: Sequence[MatrixFiles], records: Sequence[dict[str, Any]], out: MatrixFiles
) -> int:
    """Concatenate stored shards in order into one matrix (streamed to disk), its ids and one
    provenance record (`records`: each shard's provenance); return the number of rows."""
    if not shards or len(shards) != len(records):
        raise VlbenchError(f"{out.embeddings}: gather needs one provenance record per shard")
    matrices = [np.load(files.embeddings, mmap_mode="r", allow_pickle=False) for files in shards]
    shapes = [matrix.shape for matrix in matrices]
    dtypes = {matrix.dtype for matrix in matrices}
    widths = {shape[1] for shape in shapes if len(shape) == 2}
    if len(widths) != 1 or len(dtypes) != 1 or any(len(shape) != 2 for shape in shapes):
        raise VlbenchError(
            f"{shards[0].embeddings}: shards disagree in shape or dtype ({shapes}, {dtypes})"
        )
    rows = sum(shape[0] for shape in shapes)
    with atomic_path(out.ids) as tmp, pq.ParquetWriter(tmp, IDS_SCHEMA) as writer:
        for files, shape in zip(shards, shapes, strict=True):
            ids = read_parquet(files.ids)
            if ids.num_rows != shape[0]:
                raise VlbenchError(
                    f"{files.ids}: {ids.num_rows} ids for {shape[0]} rows in {files.embeddings}"
                )
            writer.write_table(ids.select(["id"]).cast(IDS_SCHEMA))
    dtype, shape = dtypes.pop(), (rows, widths.pop())
    unified = None
    with (
        atomic_path(out.embeddings, expected_bytes=npy_bytes(dtype, shape)) as tmp,
        open(tmp, "r+b") as handle,
    ):
        matrix = reserved_npy_memmap(handle, dtype, shape)
        row = 0
        for files in shards:
            shard = np.load(files.embeddings, mmap_mode="r", allow_pickle=False)
            matrix[row : row + len(shard)] = shard
            row += len(shard)
        if records[0].get("modality") == "text" and len(shards) > 1:
            ids = read_parquet(out.ids).column("id").to_pylist()
            unified = unify_duplicate_texts(matrix, records[0]["source"], ids)
        matrix.flush()
        del matrix
    merged = merge_provenance(records)
    if unified is not None:
        merged["duplicate_text_rows_unified"] = unified
    write_provenance(out, merged)
    return rows


def unify_duplicate_texts(matrix: np.ndarray, source: str | Path, ids: Sequence[str]) -> int:
    """Give every copy of a text the embedding of its first occurrence; return how many rows
    changed.

    The embedding job encodes each distinct text of a shard once, so copies within a shard are
    equal already; copies in different shards were encoded in different batches, and a text
    tower's output depends on its batch in the last bits. After this, identical texts have
    identical rows across the whole benchmark, so the exact tie policies hold by construction.
    """
    table = read_parquet(source)
    id_column, text_column = table.column_names[:2]
    if table.column(id_column).to_pylist() != list(ids):
        raise VlbenchError(f"{source}: its text ids are not those of the gathered shards")
    first: dict[str, int] = {}
    changed = 0
    for row, text in enumerate(table.column(text_column).to_pylist()):
        original = first.setdefault(text, row)
        if original != row and not np.array_equal(matrix[row], matrix[original]):
            matrix[row] = matrix[original]
            changed += 1
    return changed


PER_SHARD_KEYS = (
    "rows",
    "content_key",
    "files",
    "seconds",
    "items_per_second",
    "peak_rss_mb",
    "pixel_cache",
    "host",
    "device",
    "device_name",
    "cuda_visible_devices",
    "slurm_job_id",
    "reused",
)


def merge_provenance(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One provenance record for a gathered matrix: shared fields once, per-shard fields listed."""
    shared = {key: value for key, value in records[0].items() if key not in PER_SHARD_KEYS}
    shards = [{key: record.get(key) for key in PER_SHARD_KEYS} for record in records]
    seconds = sum(record.get("seconds") or 0 for record in records)
    rows = sum(stop - start for start, stop in (record["rows"] for record in records))
    return {
        **shared,
        "rows": rows,
        "seconds": round(seconds, 3),
        "items_per_second": round(rows / seconds, 2) if seconds > 0 else None,
        "shards": shards,
    }
