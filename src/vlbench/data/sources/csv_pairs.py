"""Cornell Bird / PlantID: annotation CSV (id, source_url, captions, md5) + user image folder."""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vlbench.data.sources.contained import ContainedFolder, follows_links
from vlbench.data.sources.records import ImageRecord, SourceData
from vlbench.errors import VlbenchError

DEFAULT_COLUMNS = {"id": "id", "caption": "captions", "md5": "md5"}


def checked_reader(path: Path, expected_md5: str | None) -> Any:
    """A function reading `path` that fails when its md5 differs from the published one."""

    def read() -> bytes:
        data = path.read_bytes()
        if expected_md5:
            actual = hashlib.md5(data, usedforsecurity=False).hexdigest()
            if actual != expected_md5.strip().lower():
                raise VlbenchError(f"{path}: md5 {actual} != published {expected_md5}")
        return data

    return read


def load(root: Path, source: dict[str, Any], benchmark: dict[str, Any], where: str) -> SourceData:
    """1-to-1 pairs: row i's image (found by id in the image folder) <-> row i's caption."""
    columns = {**DEFAULT_COLUMNS, **source.get("columns", {})}
    annotations = root / source.get("annotations", "annotations.csv")
    if not annotations.is_file():
        raise VlbenchError(f"{where}.annotations: file not found: {annotations}")
    folder = ContainedFolder(root / source.get("images", "."), follows_links(source))
    name = source.get("image_name", "{id}.jpg")
    verify = source.get("verify_md5", True)
    prefix = benchmark.get("prompt_prefix", "")
    with open(annotations, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        needed = [columns["id"], columns["caption"]] + ([columns["md5"]] if verify else [])
        missing = [column for column in needed if column not in header]
        if missing:
            raise VlbenchError(
                f"{annotations}: missing column(s) {', '.join(missing)} (has: {', '.join(header)})"
            )
        rows = list(reader)
    texts, records = [], []
    for line, row in enumerate(rows, start=2):
        item_id = (row[columns["id"]] or "").strip()
        caption = row[columns["caption"]] or ""
        if not item_id:
            raise VlbenchError(f"{annotations}: line {line}: empty id")
        if not caption.strip():
            raise VlbenchError(f"{annotations}: line {line}: the caption is empty")
        texts.append((item_id, prefix + caption, None))
        md5 = row.get(columns["md5"]) if verify else None
        path = folder.path(name.format(id=item_id), f"{annotations}: line {line}")
        records.append(
            ImageRecord(item_id, checked_reader(path, md5), None, f"{annotations}: line {line}")
        )

    def images() -> Iterator[ImageRecord]:
        yield from records

    qrels = [(item_id, item_id, 1) for item_id, _, _ in texts]
    info = {"prompt_prefix": prefix, "md5_verified": bool(verify)}
    return SourceData(images(), texts, qrels, info=info)
