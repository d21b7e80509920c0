"""Embedding files without torch: shard plans, shard and matrix files, the gather, provenance.

A shard is written as ``<modality>/shard-XXXXX.npy`` (the matrix, float32 or float16),
``.ids.parquet`` and ``.json`` (provenance), each atomically, the provenance last: it carries the
shard's content key (what was embedded, by which model, how), so a shard whose key still matches
is reused instead of embedded again. Jobs that only read, plan or gather these files import this
module, not the model stack.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from vlbench.atomic import atomic_path, npy_bytes, reserved_npy_memmap, write_text
from vlbench.data.decode_policy import LEGACY, policy_of_metadata, read_policy
from vlbench.errors import VlbenchError

IDS_SCHEMA = pa.schema([("id", pa.string())])
STORAGE_DTYPES = {"float32": np.float32, "float16": np.float16}


def shard_name(index: int) -> str:
    """The file stem of shard `index`."""
    return f"shard-{index:05d}"


def shard_ranges(rows: int, shard_size: int) -> list[tuple[int, int]]:
    """Row ranges [start, stop) of consecutive shards of at most `shard_size` rows."""
    if shard_size < 1:
        raise VlbenchError(f"embedding.shard_size must be at least 1, got {shard_size}")
    return [(start, min(start + shard_size, rows)) for start in range(0, rows, shard_size)]


def shard_digests(source: str | Path, ranges: Sequence[tuple[int, int]]) -> list[str]:
    """sha256 of each row range's content: every row's id and payload (the first two columns
    of a canonical images or texts parquet: encoded image bytes, or the exact text), and the
    images file's decode policy when it is not the legacy one.

    A shard whose digest is unchanged embeds to the same numbers, so a rerun can keep it.
    """
    parquet = pq.ParquetFile(source)
    id_column, payload_column = parquet.schema_arrow.names[:2]
    digests = [hashlib.sha256() for _ in ranges]
    # An images file's decode policy changes its pixels: a non-legacy one is part of the digest
    # (legacy digests stay those of files prepared before policies existed).
    policy = policy_of_metadata(parquet.schema_arrow.metadata, str(source))
    if policy != LEGACY:
        for digest in digests:
            digest.update(json.dumps({"decode": policy.as_dict()}, sort_keys=True).encode())
    row, shard = 0, 0
    for batch in parquet.iter_batches(batch_size=256, columns=[id_column, payload_column]):
        for item_id, payload in zip(*(column.to_pylist() for column in batch.columns), strict=True):
            while row >= ranges[shard][1]:
                shard += 1
            data = payload.encode() if isinstance(payload, str) else bytes(payload or b"")
            digests[shard].update(f"{item_id}\0{len(data)}\0".encode())
            digests[shard].update(data)
            row += 1
    return [digest.hexdigest()[:24] for digest in digests]


def write_shard_plan(source: str | Path, shard_size: int, out_path: str | Path) -> int:
    """Write a parquet's shard plan (row ranges and their content digests); return the count."""
    try:
        rows = pq.ParquetFile(source).metadata.num_rows
    except (OSError, pa.ArrowInvalid) as exc:
        raise VlbenchError(f"{source}: not a readable parquet file ({exc})") from exc
    if rows == 0:
        raise VlbenchError(f"{source}: no rows to embed")
    ranges = shard_ranges(rows, shard_size)
    names = [shard_name(i) for i in range(len(ranges))]
    plan = {
        "source": str(source),
        "rows": rows,
        "shard_size": shard_size,
        "shards": {name: list(bounds) for name, bounds in zip(names, ranges, strict=True)},
        "digests": dict(zip(names, shard_digests(source, ranges), strict=True)),
    }
    write_text(out_path, json.dumps(plan, indent=2) + "\n")
    return len(ranges)


def read_shard_plan(path: str | Path) -> dict[str, Any]:
    """A shard plan written by `write_shard_plan`."""
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def embedding_content_key(rows_digest: str, identity: dict[str, Any]) -> str:
    """What a shard's numbers depend on: its rows' content digest and the model's identity
    (spec, user files' fingerprint, the embedding settings that change results)."""
    payload = json.dumps({"rows": rows_digest, **identity}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def shard_file_paths(embeddings_dir: str | Path, modality: str, shard: str) -> dict[str, Path]:
    """A shard's matrix, ids and provenance files under one (model, benchmark) folder."""
    stem = Path(embeddings_dir) / modality / shard
    return {
        "embeddings": stem.with_name(f"{shard}.npy"),
        "ids": stem.with_name(f"{shard}.ids.parquet"),
        "provenance": stem.with_name(f"{shard}.json"),
    }


def stored_shard_record(paths: dict[str, Path], content_key: str) -> dict[str, Any] | None:
    """The provenance of a complete shard with this content key; None when absent or stale."""
    try:
        record = json.loads(paths["provenance"].read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if record.get("content_key") != content_key:
        return None
    if not (paths["embeddings"].is_file() and paths["ids"].is_file()):
        return None
    return record


def stored_shards(
    embeddings_dir: str | Path, modality: str, digests: dict[str, str], identity: dict[str, Any]
) -> list[dict[str, Path]]:
    """The files of a modality's shards in order, each checked to hold its current content."""
    shards = []
    for shard, digest in sorted(digests.items()):
        paths = shard_file_paths(embeddings_dir, modality, shard)
        if stored_shard_record(paths, embedding_content_key(digest, identity)) is None:
            record = Path(embeddings_dir) / "shards" / f"{shard}.json"
            raise VlbenchError(
                f"{paths['embeddings']}: missing, or embedded from other rows or another model; "
                f"delete {record} and run again to embed the shard anew"
            )
        shards.append(paths)
    return shards


def read_embedding_ids(ids_path: str | Path) -> np.ndarray:
    """The row ids of an embedding matrix (its `.ids.parquet`), in row order."""
    return np.asarray(
        pq.read_table(ids_path, columns=["id"]).column("id").to_pylist(), dtype=object
    )


def load_embeddings(npy_path: str | Path, ids_path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read a matrix (stored float32 or float16, returned float32) and its ids; check lengths."""
    matrix = np.load(npy_path, allow_pickle=False)
    ids = read_embedding_ids(ids_path)
    if matrix.ndim != 2 or matrix.shape[0] != len(ids):
        raise VlbenchError(
            f"{npy_path}: {matrix.shape} rows do not match the {len(ids)} ids in {ids_path}"
        )
    return matrix.astype(np.float32, copy=False), ids


def save_embeddings(
    ids: Sequence[str], embeddings: np.ndarray, npy_path: Path, ids_path: Path
) -> None:
    """Write the ids, then the matrix (the matrix last: its presence means complete)."""
    with atomic_path(ids_path) as tmp:
        pq.write_table(pa.table([list(ids)], schema=IDS_SCHEMA), tmp)
    expected = npy_bytes(embeddings.dtype, embeddings.shape)
    with atomic_path(npy_path, expected_bytes=expected) as tmp, open(tmp, "wb") as handle:
        np.save(handle, embeddings, allow_pickle=False)


def read_snakemake_benchmark(path: str | Path) -> dict[str, Any]:
    """The one row of a Snakemake `benchmark:` TSV (seconds, max_rss in MB, ...)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    if len(lines) < 2:
        return {}
    row: dict[str, Any] = {}
    for key, value in zip(lines[0].split("\t"), lines[-1].split("\t"), strict=False):
        try:
            row[key] = float(value)
        except ValueError:
            row[key] = value
    return row


def gather_shards(
    shard_npys: Sequence[str | Path],
    shard_ids: Sequence[str | Path],
    shard_provenance: Sequence[str | Path],
    out_npy: Path,
    out_ids: Path,
    out_provenance: Path,
    shard_timings: Sequence[str | Path] = (),
) -> int:
    """Concatenate shards in order into one matrix (streamed to disk) and ids; return rows."""
    if not shard_npys or not len(shard_npys) == len(shard_ids) == len(shard_provenance):
        raise VlbenchError(f"{out_npy}: gather needs one npy, ids and provenance file per shard")
    shards = [np.load(path, mmap_mode="r", allow_pickle=False) for path in shard_npys]
    shapes = [shard.shape for shard in shards]
    dtypes = {shard.dtype for shard in shards}
    widths = {shape[1] for shape in shapes if len(shape) == 2}
    if len(widths) != 1 or len(dtypes) != 1 or any(len(shape) != 2 for shape in shapes):
        raise VlbenchError(
            f"{shard_npys[0]}: shards disagree in shape or dtype ({shapes}, {dtypes})"
        )
    rows = sum(shape[0] for shape in shapes)
    with atomic_path(out_ids) as tmp, pq.ParquetWriter(tmp, IDS_SCHEMA) as writer:
        for npy, ids_path, shape in zip(shard_npys, shard_ids, shapes, strict=True):
            ids = pq.read_table(ids_path)
            if ids.num_rows != shape[0]:
                raise VlbenchError(f"{ids_path}: {ids.num_rows} ids for {shape[0]} rows in {npy}")
            writer.write_table(ids.select(["id"]).cast(IDS_SCHEMA))
    records = [json.loads(Path(path).read_text(encoding="utf-8")) for path in shard_provenance]
    dtype, shape = dtypes.pop(), (rows, widths.pop())
    unified = None
    with (
        atomic_path(out_npy, expected_bytes=npy_bytes(dtype, shape)) as tmp,
        open(tmp, "r+b") as handle,
    ):
        matrix = reserved_npy_memmap(handle, dtype, shape)
        row = 0
        for npy in shard_npys:
            shard = np.load(npy, mmap_mode="r", allow_pickle=False)
            matrix[row : row + len(shard)] = shard
            row += len(shard)
        if records[0].get("modality") == "text" and len(shard_npys) > 1:
            ids = pq.read_table(out_ids).column("id").to_pylist()
            unified = unify_duplicate_texts(matrix, records[0]["source"], ids)
        matrix.flush()
        del matrix
    timings = [read_snakemake_benchmark(path) for path in shard_timings]
    merged = merge_provenance(records, timings)
    if unified is not None:
        merged["duplicate_text_rows_unified"] = unified
    if "decode_policy" not in merged:  # shards stored before their records carried it
        merged.update(decode_provenance(merged))
    write_text(out_provenance, json.dumps(merged, indent=2) + "\n")
    return rows


def unify_duplicate_texts(matrix: np.ndarray, source: str | Path, ids: Sequence[str]) -> int:
    """Give every copy of a text the embedding of its first occurrence; return how many rows
    changed.

    A shard job encodes each distinct text of its shard once, so copies within a shard are
    equal already; copies in different shards were encoded in different batches, and a text
    tower's output depends on its batch in the last bits. After this, identical texts have
    identical rows across the whole benchmark, so the exact tie policies hold by construction.
    """
    table = pq.read_table(source)
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


def decode_provenance(record: dict[str, Any]) -> dict[str, Any]:
    """`decode_policy` of an image embedding: read from the images file it was embedded from."""
    source = record.get("source")
    if record.get("modality") != "image" or not source or not Path(source).is_file():
        return {}
    return {"decode_policy": read_policy(source).as_dict()}


PER_SHARD_KEYS = (
    "rows",
    "content_key",
    "seconds",
    "items_per_second",
    "peak_rss_mb",
    "pixel_cache",
    "host",
    "device",
    "device_name",
    "cuda_visible_devices",
    "slurm_job_id",
)


def merge_provenance(
    records: Sequence[dict[str, Any]], timings: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    """One provenance record for a gathered matrix: shared fields once, per-shard fields listed."""
    shared = {key: value for key, value in records[0].items() if key not in PER_SHARD_KEYS}
    shards = []
    for index, record in enumerate(records):
        shard = {key: record.get(key) for key in PER_SHARD_KEYS}
        if index < len(timings) and timings[index]:
            shard["snakemake_benchmark"] = timings[index]
        shards.append(shard)
    seconds = sum(record.get("seconds") or 0 for record in records)
    rows = sum(stop - start for start, stop in (record["rows"] for record in records))
    return {
        **shared,
        "rows": rows,
        "seconds": round(seconds, 3),
        "items_per_second": round(rows / seconds, 2) if seconds > 0 else None,
        "shards": shards,
    }
