"""Flickr30k / COCO with ~5 captions per image, from the three layouts they are published in.

- `nlphuji_csv_zip`: the nlphuji hub repos' raw files (CSV with `filename` and `raw`, a JSON
  list of captions, plus an image zip); their loading script is not run.
- `clip_benchmark_wds`: clip_benchmark's webdataset repos (`<split>/<n>.tar`, one image plus a
  `txt` member with newline-separated captions per sample).
- `karpathy_json`: the Karpathy split JSON (`dataset_flickr30k.json`, `dataset_coco.json`) plus
  the image folder; subset `test` or `full` (the large pool: every split in the gallery, only
  the test split judged).
"""

from __future__ import annotations

import csv
import json
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from vlbench.data.sources.contained import (
    ContainedFolder,
    follows_links,
    member_name,
    relative_inside,
)
from vlbench.data.sources.records import ImageRecord, SourceData
from vlbench.errors import VlbenchError

IMAGE_SUFFIXES = ("jpg", "jpeg", "png", "webp")
KARPATHY_SUBSETS = {"test": ("test",), "full": ("train", "restval", "val", "test")}

Texts = list[tuple[str, str, str | None]]
Qrels = list[tuple[str, str, int]]


def _captions(image_id: str, captions: list[str], texts: Texts, qrels: Qrels, judged: bool) -> None:
    for number, caption in enumerate(captions):
        text_id = f"{image_id}#{number}"
        texts.append((text_id, caption, None))
        if judged:
            qrels.append((image_id, text_id, 1))


def _required(root: Path, source: dict[str, Any], key: str, where: str) -> Path:
    if not source.get(key):
        raise VlbenchError(f"{where}.{key} is required for format {source.get('format')}")
    path = root / source[key]
    if not path.is_file():
        raise VlbenchError(f"{where}.{key}: file not found: {path}")
    return path


def load_nlphuji(
    root: Path, source: dict[str, Any], benchmark: dict[str, Any], where: str
) -> SourceData:
    """CSV rows (filename, raw = JSON caption list) and the image zip, matched by file name."""
    table = _required(root, source, "annotations", where)
    archive = _required(root, source, "archive", where)
    with open(table, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in ("filename", "raw") if c not in (reader.fieldnames or [])]
        if missing:
            raise VlbenchError(f"{table}: missing column(s) {', '.join(missing)}")
        rows = list(reader)
    texts: Texts = []
    qrels: Qrels = []
    for line, row in enumerate(rows, start=2):
        # Matched by file name to a member of the zip: a bare name, never a path out of it.
        name = relative_inside(row["filename"], f"{table}: line {line}", f"the archive {archive}")
        if len(name.parts) != 1:
            raise VlbenchError(
                f"{table}: line {line}: 'filename' {row['filename']!r} must be a bare file name "
                f"(images are matched by name in {archive})"
            )
        try:
            captions = json.loads(row["raw"])
        except json.JSONDecodeError as exc:
            raise VlbenchError(f"{table}: line {line}: 'raw' is not a JSON list ({exc})") from exc
        if not isinstance(captions, list) or not captions:
            raise VlbenchError(f"{table}: line {line}: 'raw' must be a non-empty list of captions")
        _captions(row["filename"], [str(c) for c in captions], texts, qrels, judged=True)

    def images() -> Iterator[ImageRecord]:
        with zipfile.ZipFile(archive) as zipped:
            members = {
                PurePosixPath(name).name: member_name(name, archive)
                for name in zipped.namelist()
                if not name.endswith("/")
            }
            for line, row in enumerate(rows, start=2):
                member = members.get(row["filename"])

                def read(member: str | None = member, name: str = row["filename"]) -> bytes:
                    if member is None:
                        raise VlbenchError(f"{archive}: no member named {name}")
                    return zipped.read(member)

                yield ImageRecord(row["filename"], read, None, f"{table}: line {line}")

    return SourceData(images(), texts, qrels, info={"n_images_listed": len(rows)})


def _shards(root: Path, split: str, where: str) -> list[Path]:
    folder = root / split
    shards = sorted(
        folder.glob("*.tar"), key=lambda p: (int(p.stem) if p.stem.isdigit() else 1 << 60, p.name)
    )
    if not shards:
        raise VlbenchError(f"{where}: no webdataset shards {folder}/*.tar")
    return shards


def _samples(shard: Path, want_images: bool) -> Iterator[tuple[str, dict[str, bytes]]]:
    """(key, {extension: bytes}) per sample, in shard order (members grouped by key)."""
    current, fields = None, {}
    with tarfile.open(shard) as tar:
        for member in tar:
            if not member.isfile():
                continue
            directory, _, base = member_name(member.name, shard).rpartition("/")
            stem, dot, extension = base.partition(".")
            if not dot:
                continue
            key = f"{directory}/{stem}" if directory else stem
            if key != current:
                if current is not None:
                    yield current, fields
                current, fields = key, {}
            if extension == "txt" or (want_images and extension.lower() in IMAGE_SUFFIXES):
                handle = tar.extractfile(member)
                fields[extension.lower()] = handle.read() if handle else b""
        if current is not None:
            yield current, fields


def load_wds(
    root: Path, source: dict[str, Any], benchmark: dict[str, Any], where: str
) -> SourceData:
    """clip_benchmark webdataset shards: image + newline-separated captions per sample."""
    shards = _shards(root, source.get("split", "test"), where)
    texts: Texts = []
    qrels: Qrels = []
    for shard in shards:
        for key, fields in _samples(shard, want_images=False):
            if "txt" not in fields:
                raise VlbenchError(f"{shard}: sample {key!r} has no txt member")
            captions = [c for c in fields["txt"].decode("utf-8").split("\n") if c.strip()]
            if not captions:
                raise VlbenchError(f"{shard}: sample {key!r} has no caption")
            _captions(key, captions, texts, qrels, judged=True)

    def images() -> Iterator[ImageRecord]:
        for shard in shards:
            for key, fields in _samples(shard, want_images=True):
                data = next((fields[s] for s in IMAGE_SUFFIXES if s in fields), b"")
                yield ImageRecord(key, data, None, f"{shard}: sample {key}")

    return SourceData(images(), texts, qrels, info={"shards": [s.name for s in shards]})


def load_karpathy(
    root: Path, source: dict[str, Any], benchmark: dict[str, Any], where: str
) -> SourceData:
    """Karpathy JSON + image folder; `subset: full` puts every split in the gallery."""
    annotations = _required(root, source, "annotations", where)
    subset = source.get("subset", "test")
    if subset not in KARPATHY_SUBSETS:
        raise VlbenchError(f"{where}.subset must be one of {', '.join(KARPATHY_SUBSETS)}")
    folder = ContainedFolder(root / source.get("images", "."), follows_links(source))
    try:
        entries = json.loads(annotations.read_text(encoding="utf-8"))["images"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise VlbenchError(f"{annotations}: not a Karpathy split file ({exc})") from exc
    numbered = [(n, e) for n, e in enumerate(entries) if e.get("split") in KARPATHY_SUBSETS[subset]]
    chosen = [entry for _, entry in numbered]
    texts: Texts = []
    qrels: Qrels = []
    for entry in chosen:
        captions = [s.get("raw", "") for s in entry.get("sentences", [])]
        if not captions:
            raise VlbenchError(f"{annotations}: image {entry.get('filename')!r} has no sentences")
        _captions(entry["filename"], captions, texts, qrels, judged=entry["split"] == "test")

    paths = [
        folder.path(
            str(PurePosixPath(entry.get("filepath", "")) / entry["filename"]),
            f"{annotations}: images[{number}]",
        )
        for number, entry in numbered
    ]

    def images() -> Iterator[ImageRecord]:
        for entry, path in zip(chosen, paths, strict=True):
            yield ImageRecord(entry["filename"], path.read_bytes, None, str(annotations))

    splits = sorted({e["split"] for e in chosen})
    return SourceData(images(), texts, qrels, info={"karpathy_splits": splits})
