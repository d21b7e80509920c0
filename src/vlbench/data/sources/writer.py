"""Write a loaded source into the canonical layout (vlbench.data.canonical), validating it."""

from __future__ import annotations

import contextlib
import json
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from vlbench.atomic import atomic_path, start_writeback
from vlbench.data.canonical import (
    CANDIDATES_SCHEMA,
    IMAGE_BATCH_ROWS,
    IMAGES_SCHEMA,
    QRELS_SCHEMA,
    TEXTS_SCHEMA,
)
from vlbench.data.decode_policy import LEGACY, DecodePolicy, policy_metadata
from vlbench.data.sources.image_check import decode_error, header_error
from vlbench.data.sources.records import (
    Candidates,
    EncodedImage,
    ImageRecord,
    SourceData,
    encoded_size,
)
from vlbench.data.sources.validate import (
    check_candidates,
    check_count,
    check_qrels,
    check_texts,
    check_unique,
)
from vlbench.errors import VlbenchError
from vlbench.paths import MODALITY_FILES
from vlbench.protocols import protocol as protocol_record

ROW_GROUP_ROWS = 256
# How each image policy checks images while preparing. `skip` must know which images decode, so
# it decodes each one (a reduced-size draft where possible); under `fail` prepare reads only
# each image's header and the embedding job's decode, the one the models see, is the check: an
# image that does not decode fails it naming the image (vlbench.embedding.loader.decode_image).
# So the default path decodes every image once, not twice.
IMAGE_CHECKS: dict[str, tuple[str, Callable[[EncodedImage], str | None]]] = {
    "fail": ("header", header_error),
    "skip": ("decode", decode_error),
}
IMAGE_POLICIES = tuple(IMAGE_CHECKS)
# Images read ahead and checked per thread: enough to keep the threads busy while the source
# reads a batch or a row group is written (bursts of ~0.2 s), few enough that only a small
# window of encoded images is held besides the row group being filled. The window also stops
# growing past CHECK_WINDOW_BYTES of encoded images (but always holds one image per thread).
CHECK_WINDOW_PER_THREAD = 32
CHECK_WINDOW_BYTES = 64 * 2**20
# Encoded images are already compressed (JPEG, PNG, WebP): the image column is stored as is,
# without compression or a dictionary (which would hash every image); the small columns keep
# parquet's defaults. The schema is IMAGES_SCHEMA either way.
IMAGE_WRITE_OPTIONS: dict[str, Any] = {
    "compression": {"image_id": "snappy", "image": "none", "group": "snappy"},
    "use_dictionary": ["image_id", "group"],
}

# One image in source order: its record, its encoded bytes, and why it is left out (None: kept).
Checked = tuple[ImageRecord, EncodedImage, str | None]


def _read_images(data: SourceData, where: str, seen: set[str]) -> Iterator[Checked]:
    """Each image in source order with its bytes, or with the reason it cannot be read."""
    for record in data.images:
        if record.image_id in seen:
            raise VlbenchError(f"{record.where or where}: duplicate image id {record.image_id!r}")
        seen.add(record.image_id)
        try:
            encoded = record.read()
        except (OSError, KeyError, VlbenchError) as exc:
            yield record, b"", f"unreadable: {exc}"
            continue
        yield record, encoded, None


def _checked(
    images: Iterator[Checked],
    threads: int,
    check: Callable[[EncodedImage], str | None] = decode_error,
) -> Iterator[Checked]:
    """`images` in the same order, each readable one checked (`check`: its reason, or None).

    With more than one thread, the images are checked in a thread pool (PIL releases the GIL
    while decoding) while the caller reads and writes; at most CHECK_WINDOW_PER_THREAD images
    per thread, or CHECK_WINDOW_BYTES of them (yet one per thread), are held at once.
    """
    if threads <= 1:
        for record, encoded, reason in images:
            yield record, encoded, reason or check(encoded)
        return
    window: deque[tuple[ImageRecord, EncodedImage, str | None, Future[str | None] | None]] = deque()
    held = 0  # encoded bytes in the window

    def settle() -> Checked:
        nonlocal held
        record, encoded, reason, check = window.popleft()
        held -= encoded_size(encoded)
        return record, encoded, reason if check is None else check.result()

    pool = ThreadPoolExecutor(threads, thread_name_prefix="decode-check")
    try:
        for record, encoded, reason in images:
            future = None if reason else pool.submit(check, encoded)
            window.append((record, encoded, reason, future))
            held += encoded_size(encoded)
            while len(window) >= threads * CHECK_WINDOW_PER_THREAD or (
                held >= CHECK_WINDOW_BYTES and len(window) > threads
            ):
                yield settle()
        while window:
            yield settle()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _stream_images(
    data: SourceData,
    writer: pq.ParquetWriter,
    where: str,
    threads: int = 1,
    schema: pa.Schema = IMAGES_SCHEMA,
    check: Callable[[EncodedImage], str | None] = decode_error,
    row_group_written: Callable[[], object] = lambda: None,
) -> tuple[int, list[tuple[str, str]], list[str]]:
    """Write the images that pass `check` in row groups; return (seen, [(bad id, reason)],
    written ids).

    `threads` images are checked at once; the order, the ids and the reasons are those of a
    one-thread check. `row_group_written` is called after each row group is written.
    """
    seen: set[str] = set()
    bad: list[tuple[str, str]] = []
    written: list[str] = []
    batch: dict[str, list[Any]] = {"image_id": [], "image": [], "group": []}
    # A row group is written from small tables of IMAGE_BATCH_ROWS rows each (a chunked table,
    # not one contiguous copy of the whole row group's images), so memory is reused as it goes.
    pending: list[pa.Table] = []

    def convert() -> None:
        if batch["image_id"]:
            columns = {**batch, "image": _image_column(batch["image"])}
            pending.append(pa.table(columns, schema=schema))
            for column in batch.values():
                column.clear()

    def flush() -> None:
        convert()
        if pending:
            writer.write_table(pa.concat_tables(pending), row_group_size=ROW_GROUP_ROWS)
            pending.clear()
            row_group_written()

    checked = _checked(_read_images(data, where, seen), threads, check)
    with contextlib.closing(checked):
        for record, encoded, reason in checked:
            if reason:
                bad.append((record.image_id, reason))
                continue
            batch["image_id"].append(record.image_id)
            batch["image"].append(encoded)
            batch["group"].append(record.group)
            written.append(record.image_id)
            if len(written) % ROW_GROUP_ROWS == 0:
                flush()
            elif len(batch["image_id"]) >= IMAGE_BATCH_ROWS:
                convert()
    flush()
    return len(seen), bad, written


def _image_column(images: list[EncodedImage]) -> list[EncodedImage] | pa.ChunkedArray:
    """The image column of a batch: the bytes as given, or, where the source handed arrays,
    the arrays chained without a copy (the parquet writer copies them once, into the file)."""
    if not any(isinstance(image, pa.Array) for image in images):
        return images
    chunks = [
        image if isinstance(image, pa.Array) else pa.array([image], pa.binary()) for image in images
    ]
    return pa.chunked_array(chunks, type=pa.binary())


def _drop_images(data: SourceData, dropped: set[str], protocol: str) -> None:
    """Remove skipped images from judgements and candidate lists (and orphaned texts)."""
    if not dropped:
        return
    linked: dict[str, set[str]] = {}
    for image_id, text_id, _ in data.qrels:
        linked.setdefault(text_id, set()).add(image_id)
    data.qrels = [row for row in data.qrels if row[0] not in dropped]
    if protocol_record(protocol).item_retrieval:  # texts only describe their images
        orphans = {text for text, images in linked.items() if images <= dropped}
        data.texts = [row for row in data.texts if row[0] not in orphans]
        data.qrels = [row for row in data.qrels if row[1] not in orphans]
    kept: list[Candidates] = []
    for row in data.candidates:
        if row.query_modality == "image" and row.query_id in dropped:
            continue
        if row.query_modality == "text":
            # The groups are the query's candidate taxa in order, not one per candidate id:
            # a taxon whose images were all skipped stays a candidate (it scores no entry).
            row = Candidates(
                row.query_modality,
                row.query_id,
                [cid for cid in row.candidate_ids if cid not in dropped],
                row.candidate_groups,
            )
        kept.append(row)
    data.candidates = kept


def _candidates_table(rows: list[Candidates]) -> pa.Table:
    return pa.table(
        {
            "query_modality": [row.query_modality for row in rows],
            "query_id": [row.query_id for row in rows],
            "candidate_ids": [row.candidate_ids for row in rows],
            "candidate_groups": [row.candidate_groups for row in rows],
        },
        schema=CANDIDATES_SCHEMA,
    )


def write_canonical(
    data: SourceData,
    protocol: str,
    out_dir: str | Path,
    provenance: dict[str, Any],
    image_policy: str = "fail",
    expected: dict[str, int] | None = None,
    where: str = "benchmark",
    threads: int = 1,
    decode: DecodePolicy = LEGACY,
) -> dict[str, Any]:
    """Validate and write images/texts/qrels/candidates parquet plus benchmark.json.

    `decode` (how the embedding jobs decode the images) is recorded in the images file's
    schema metadata and in benchmark.json.

    Unreadable images fail the run (policy "fail") or are left out and recorded ("skip");
    IMAGE_CHECKS says how each policy checks them.
    `expected` holds row counts known for the pinned source ("images", "texts"), compared
    with what the source holds before anything is skipped. Nothing appears under `out_dir`
    unless every check passes. `threads` images are decoded at once by the check of
    `skip` (the output does not depend on it). Returns the benchmark.json content.
    """
    if image_policy not in IMAGE_POLICIES:
        raise VlbenchError(f"{where}: image_policy must be one of {', '.join(IMAGE_POLICIES)}")
    out_dir = Path(out_dir)
    expected = expected or {}
    check_count(len(data.texts), expected.get("texts"), "texts", where)
    with contextlib.ExitStack() as stack:
        images_tmp = stack.enter_context(atomic_path(out_dir / MODALITY_FILES["image"]))
        schema = IMAGES_SCHEMA.with_metadata(policy_metadata(decode))
        check_name, check = IMAGE_CHECKS[image_policy]
        with pq.ParquetWriter(images_tmp, schema, **IMAGE_WRITE_OPTIONS) as writer:
            n_source, bad, written = _stream_images(
                data,
                writer,
                where,
                threads if check is decode_error else 1,
                schema,
                check,
                # The file's bytes go to disk as it grows, not all at the fsync before its rename.
                lambda: start_writeback(images_tmp),
            )
        if n_source == 0:
            raise VlbenchError(f"{where}: the benchmark has no images")
        check_count(n_source, expected.get("images"), "images", where)
        if bad and image_policy == "fail":
            shown = "; ".join(f"{image_id!r} ({reason})" for image_id, reason in bad[:3])
            raise VlbenchError(
                f"{where}: {len(bad)} image(s) cannot be read or decoded, e.g. {shown} "
                "(set image_policy: skip to leave them out and record them)"
            )
        _drop_images(data, {image_id for image_id, _ in bad}, protocol)
        if not written:
            raise VlbenchError(f"{where}: no image could be decoded")
        text_ids = [row[0] for row in data.texts]
        check_unique(text_ids, "text", where)
        check_texts(data.texts, where)
        image_set, text_set = set(written), set(text_ids)
        check_qrels(data.qrels, image_set, text_set, where)
        check_candidates(data.candidates, {"image": image_set, "text": text_set}, where)

        texts_tmp = stack.enter_context(atomic_path(out_dir / MODALITY_FILES["text"]))
        pq.write_table(
            pa.table(
                {
                    "text_id": text_ids,
                    "text": [row[1] for row in data.texts],
                    "group": [row[2] for row in data.texts],
                },
                schema=TEXTS_SCHEMA,
            ),
            texts_tmp,
            row_group_size=4096,
        )
        qrels_tmp = stack.enter_context(atomic_path(out_dir / "qrels.parquet"))
        pq.write_table(
            pa.table(
                {
                    "image_id": [row[0] for row in data.qrels],
                    "text_id": [row[1] for row in data.qrels],
                    "relevance": [int(row[2]) for row in data.qrels],
                },
                schema=QRELS_SCHEMA,
            ),
            qrels_tmp,
        )
        candidates_tmp = stack.enter_context(atomic_path(out_dir / "candidates.parquet"))
        pq.write_table(_candidates_table(data.candidates), candidates_tmp)
        meta = {
            **provenance,
            **data.info,
            "protocol": protocol,
            "image_policy": image_policy,
            "image_check": check_name,
            "decode_policy": decode.as_dict(),
            "n_source_images": n_source,
            "n_images": len(written),
            "n_texts": len(text_ids),
            "n_qrels": len(data.qrels),
            "n_candidate_lists": len(data.candidates),
            "n_skipped_images": len(bad),
            "skipped_images": [{"image_id": i, "reason": r} for i, r in bad],
        }
        meta.setdefault("subset", meta.get("split"))
        meta_tmp = stack.enter_context(atomic_path(out_dir / "benchmark.json"))
        meta_tmp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return meta
