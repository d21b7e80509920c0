"""Zero-shot classification sets: annotation CSV(s) + image folder(s), class texts x templates.

Covers the hub image-folder repos (Rare Species, IDLE-OO Camera Traps) and the user-supplied
folders (NABirds, Meta-Album) that BioCAP reads as a `metadata.csv` with `filepath,class`.

A source with a `reference` annotation file (the CSV a paper's evaluation code reads,
`vlbench.data.sources.reference_files`) is read from that file instead of the source's own
annotations: its rows, in its order, with its class columns, are the images and classes. Each
row's file is found under the source's image folder either as written (`filepath` relative to
it) or, with `join`, by the key a regular expression's groups take from both the row's file
and the image files' paths (e.g. Rare Species' `<eol_content_id>_<eol_page_id>` in both the
reference's `2024-03-20/...-copy.jpg` and the hub's `dataset/<taxon>/...-copy.jpg`). A row
that finds no image, or a key two images share, stops the prepare job naming the rows.
"""

from __future__ import annotations

import csv
import functools
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from vlbench.data.sources.contained import ContainedFolder, follows_links
from vlbench.data.sources.records import ImageRecord, SourceData
from vlbench.errors import VlbenchError

RANKS = ("kingdom", "phylum", "class", "order", "family", "genus", "species")
# Canonical key -> CSV column. `label` (the class as given) and the taxonomic rank `class` both
# default to the CSV column "class": BioCAP's folders hold the label there, Rare Species the rank.
DEFAULT_COLUMNS = {"file": "filepath", "label": "class", "common": "common_name"}
DEFAULT_COLUMNS.update({rank: rank for rank in RANKS})
# The canonical columns each text type is written from (see class_text).
TEXT_TYPE_COLUMNS = {
    "asis": ("label",),
    "sci": ("genus", "species"),
    "com": ("common",),
    "taxon": RANKS,
    "sci_com": ("genus", "species", "common"),
    "taxon_com": (*RANKS, "common"),
}
TEXT_TYPES = tuple(TEXT_TYPE_COLUMNS)
TEMPLATE_SETS = ("openai_imagenet", "none")
# The 80 OpenAI ImageNet templates as data (where they come from: the file's `source`).
OPENAI_TEMPLATES = Path(__file__).with_name("openai_imagenet_templates.json")


def templates(name: str) -> list[Callable[[str], str]]:
    """The prompt templates: the 80 OpenAI ImageNet ones, or the bare class text."""
    if name == "none":
        return [lambda text: text]
    if name != "openai_imagenet":
        raise VlbenchError(f"unknown template set {name!r} (known: {', '.join(TEMPLATE_SETS)})")
    with open(OPENAI_TEMPLATES, encoding="utf-8") as handle:
        listed = json.load(handle)["templates"]
    return [functools.partial(str.format, template) for template in listed]


def _scientific(genus: str, species: str) -> str:
    """`Taxon.scientific_name`: "Genus species", the genus alone, or nothing."""
    if species:
        return f"{genus} {species}"
    return genus


def _taxonomic(ranks: list[str]) -> str:
    """`Taxon.taxonomic_name`: all seven ranks joined by single spaces, empty ones included
    (their double spaces are the reference's; the open_clip tokenizers collapse whitespace), or
    "Genus species" when the kingdom is empty."""
    if not ranks[0]:
        return f"{ranks[5]} {ranks[6]}"
    return " ".join(ranks)


def class_text(row: dict[str, str], columns: dict[str, str], text_type: str) -> str:
    """One class's text in a BioCLIP-family text type, exactly as BioCAP and BioCLIP 2 write it
    (`imageomics/naming_eval.py`, `Taxon` and `to_classes`, Imageomics/biocap @ 6e589be): the
    ranks kingdom to genus `.capitalize()`d, the species epithet lower-cased, values otherwise
    verbatim, " with common name X" appended when the common name is not empty."""
    if text_type == "asis":
        return row.get(columns["label"]) or ""
    ranks = [(row.get(columns[rank]) or "").capitalize() for rank in RANKS[:-1]]
    ranks.append((row.get(columns["species"]) or "").lower())
    common = row.get(columns["common"]) or ""
    scientific, taxon = _scientific(ranks[5], ranks[6]), _taxonomic(ranks)
    suffix = f" with common name {common}" if common else ""
    return {
        "sci": scientific,
        "com": common,
        "taxon": taxon,
        "sci_com": scientific + suffix,
        "taxon_com": taxon + suffix,
    }[text_type]


def _as_list(value: str | list[str] | None, default: list[str]) -> list[str]:
    if value is None:
        return default
    return [value] if isinstance(value, str) else list(value)


def _annotation_files(
    root: Path, source: dict[str, Any], where: str
) -> list[tuple[Path, ContainedFolder]]:
    """(annotation CSV, folder its file paths are relative to and must stay inside) pairs."""
    annotations = [root / item for item in _as_list(source.get("annotations"), ["metadata.csv"])]
    images = _as_list(source.get("images"), [])
    if images and len(images) not in (1, len(annotations)):
        raise VlbenchError(f"{where}.images: give one folder or one per annotations file")
    pairs = []
    for number, path in enumerate(annotations):
        if not path.is_file():
            raise VlbenchError(f"{where}.annotations: file not found: {path}")
        folder = root / images[min(number, len(images) - 1)] if images else path.parent
        pairs.append((path, ContainedFolder(folder, follows_links(source))))
    return pairs


def _read_rows(
    path: Path, columns: dict[str, str], text_type: str, where: str
) -> list[dict[str, str]]:
    """The CSV's rows, once every column the file paths and the text type need is there."""
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        needed = [columns["file"], *(columns[key] for key in TEXT_TYPE_COLUMNS[text_type])]
        missing = [name for name in dict.fromkeys(needed) if name not in header]
        if missing:
            raise VlbenchError(
                f"{where}: {path}: missing column(s) {', '.join(missing)} for text_type "
                f"{text_type!r} (has: {', '.join(header)}; map names with source.columns)"
            )
        return list(reader)


# Rows of a reference file named in one error before "and N more".
_NAMED_ROWS = 5


def _image_keys(folder: Path, pattern: re.Pattern[str], where: str) -> dict[tuple, str]:
    """Join key -> path (relative to `folder`) of every file under it whose path matches."""
    keys: dict[tuple, str] = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        match = pattern.search(relative)
        if match is None or not path.is_file():
            continue
        key = match.groups() or (match.group(0),)
        if key in keys:
            raise VlbenchError(
                f"{where}.join: images {keys[key]!r} and {relative!r} under {folder} share the "
                f"join key {key}"
            )
        keys[key] = relative
    return keys


Record = tuple[str, Path, str, str]  # image id, image file, class text, file and line


def _reference_records(
    root: Path, source: dict[str, Any], text_type: str, where: str
) -> tuple[list[Record], list[str]]:
    """The records of every row of the reference file, in its order (rows whose image cannot
    be found stop here, named), and the annotation file read."""
    reference = source["reference"]
    path = Path(reference["local"])
    columns = {**DEFAULT_COLUMNS, **reference.get("columns", {})}
    images = _as_list(source.get("images"), ["."])
    if len(images) != 1:
        raise VlbenchError(f"{where}.images: a reference file reads one image folder")
    folder = ContainedFolder(root / images[0], follows_links(source))
    join = re.compile(reference["join"]) if reference.get("join") else None
    keys = _image_keys(folder.folder, join, f"{where}.reference") if join else {}
    records: list[Record] = []
    unjoined: list[str] = []
    seen: set[str] = set()
    for number, row in enumerate(_read_rows(path, columns, text_type, where), start=2):
        written = row.get(columns["file"]) or ""
        text = class_text(row, columns, text_type)
        line = f"{path}: line {number}"
        if not written or not text.strip():
            raise VlbenchError(f"{line}: empty file path or class")
        if written in seen:
            raise VlbenchError(f"{line}: file {written!r} is listed twice")
        seen.add(written)
        if join is None:
            relative = written if (folder.folder / written).is_file() else None
        else:
            match = join.search(written)
            key = (match.groups() or (match.group(0),)) if match else None
            relative = keys.get(key) if key is not None else None
        if relative is None:
            unjoined.append(f"line {number} ({written!r})")
            continue
        records.append((written, folder.path(relative, line), text, line))
    if unjoined:
        named = ", ".join(unjoined[:_NAMED_ROWS])
        more = f" and {len(unjoined) - _NAMED_ROWS} more" if len(unjoined) > _NAMED_ROWS else ""
        how = f"by {join.pattern!r}" if join else "as written"
        raise VlbenchError(
            f"{where}.reference: {len(unjoined)} row(s) of {path} ({reference['repo']} @ "
            f"{reference['commit'][:12]}, {reference['path']}) find no image under "
            f"{folder.folder} {how}: {named}{more}"
        )
    return records, [reference["path"]]


def _annotation_records(
    root: Path, source: dict[str, Any], text_type: str, where: str
) -> tuple[list[Record], list[str]]:
    """The records of every row of the source's own annotation file(s), in file order, and
    the files read (relative to the source's folder where they lie in it)."""
    columns = {**DEFAULT_COLUMNS, **source.get("columns", {})}
    files = _annotation_files(root, source, where)
    prefix_ids = len(files) > 1
    records = []
    for path, folder in files:
        for number, row in enumerate(_read_rows(path, columns, text_type, where), start=2):
            relative = row.get(columns["file"]) or ""
            text = class_text(row, columns, text_type)
            if not relative or not text.strip():
                raise VlbenchError(f"{path}: line {number}: empty file path or class")
            image_id = f"{path.stem}/{relative}" if prefix_ids else relative
            line = f"{path}: line {number}"
            records.append((image_id, folder.path(relative, line), text, line))
    annotations = [
        str(path.relative_to(root)) if path.is_relative_to(root) else str(path) for path, _ in files
    ]
    return records, annotations


def load(root: Path, source: dict[str, Any], benchmark: dict[str, Any], where: str) -> SourceData:
    """One text per class x template (group = class); images carry their true class."""
    text_type = benchmark.get("text_type", "asis")
    if text_type not in TEXT_TYPES:
        raise VlbenchError(f"{where}: text_type must be one of {', '.join(TEXT_TYPES)}")
    read = _reference_records if "reference" in source else _annotation_records
    records, annotations = read(root, source, text_type, where)
    # A class is its text (the reference's `data['class'].unique()`), numbered in order of
    # first appearance as the reference numbers its classes: two common names of one taxon
    # are two classes under taxon_com.
    classes = dict.fromkeys(text for _, _, text, _ in records)
    prompts = templates(benchmark.get("templates", "openai_imagenet"))
    texts = [
        (f"c{ci:05d}-t{ti:02d}", prompt(text), text)
        for ci, text in enumerate(classes)
        for ti, prompt in enumerate(prompts)
    ]

    def images() -> Iterator[ImageRecord]:
        for image_id, file, key, line in records:
            yield ImageRecord(image_id, file.read_bytes, key, line)

    info = {
        "n_classes": len(classes),
        "n_templates": len(prompts),
        "text_type": text_type,
        "templates": benchmark.get("templates", "openai_imagenet"),
        "annotations": annotations,
    }
    return SourceData(images(), texts, [], info=info)


def hub_patterns(source: dict[str, Any]) -> list[str]:
    """The annotation files plus the image folders (everything with an image suffix if unnamed);
    with a reference annotation file, the image folders only."""
    annotations = (
        [] if "reference" in source else _as_list(source.get("annotations"), ["metadata.csv"])
    )
    folders = [f.strip("/") for f in _as_list(source.get("images"), []) if f.strip("./")]
    images = [f"{folder}/**" for folder in folders] or [
        "**/*.jpg",
        "**/*.jpeg",
        "**/*.JPG",
        "**/*.png",
    ]
    return [*annotations, *images]
