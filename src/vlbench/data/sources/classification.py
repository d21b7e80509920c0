"""Zero-shot classification sets: annotation CSV(s) + image folder(s), class texts x templates.

Covers the hub image-folder repos (Rare Species, IDLE-OO Camera Traps) and the user-supplied
folders (NABirds, Meta-Album) that BioCAP reads as a `metadata.csv` with `filepath,class`.
"""

from __future__ import annotations

import csv
import functools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from vlbench.data.sources.records import ImageRecord, SourceData
from vlbench.errors import VlbenchError

RANKS = ("kingdom", "phylum", "class", "order", "family", "genus", "species")
# Canonical key -> CSV column. `label` (the class as given) and the taxonomic rank `class` both
# default to the CSV column "class": BioCAP's folders hold the label there, Rare Species the rank.
DEFAULT_COLUMNS = {"file": "filepath", "label": "class", "common": "common_name"}
DEFAULT_COLUMNS.update({rank: rank for rank in RANKS})
TEXT_TYPES = ("asis", "sci", "com", "taxon", "sci_com", "taxon_com")
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


def _clean(value: str | None) -> str:
    return " ".join((value or "").split())


def species_epithet(genus: str, species: str) -> str:
    """The lower-case species epithet, also when the column holds the binomial."""
    species = _clean(species)
    if genus and species.lower().startswith(genus.lower() + " "):
        species = species[len(genus) + 1 :]
    return species.lower()


def class_text(row: dict[str, str], columns: dict[str, str], text_type: str) -> str:
    """One class's text in a BioCLIP-family text type (see config/README.md)."""
    if text_type == "asis":
        return row.get(columns["label"]) or ""
    ranks = {rank: _clean(row.get(columns[rank])) for rank in RANKS}
    ranks["species"] = species_epithet(ranks["genus"], ranks["species"])
    common = _clean(row.get(columns["common"]))
    scientific = " ".join(part for part in (ranks["genus"], ranks["species"]) if part)
    taxon = " ".join(part for part in (ranks[rank] for rank in RANKS) if part)
    suffix = f" with common name {common}" if common else ""
    return {
        "sci": scientific,
        "com": common,
        "taxon": taxon,
        "sci_com": scientific + suffix,
        "taxon_com": taxon + suffix,
    }[text_type]


def class_key(row: dict[str, str], columns: dict[str, str], text_type: str) -> str:
    """The class an image belongs to: the label as given, or its full taxon."""
    if text_type == "asis":
        return row.get(columns["label"]) or ""
    return class_text(row, columns, "taxon")


def _as_list(value: str | list[str] | None, default: list[str]) -> list[str]:
    if value is None:
        return default
    return [value] if isinstance(value, str) else list(value)


def _annotation_files(root: Path, source: dict[str, Any], where: str) -> list[tuple[Path, Path]]:
    """(annotation CSV, folder its file paths are relative to) pairs."""
    annotations = [root / item for item in _as_list(source.get("annotations"), ["metadata.csv"])]
    images = _as_list(source.get("images"), [])
    if images and len(images) not in (1, len(annotations)):
        raise VlbenchError(f"{where}.images: give one folder or one per annotations file")
    pairs = []
    for number, path in enumerate(annotations):
        if not path.is_file():
            raise VlbenchError(f"{where}.annotations: file not found: {path}")
        folder = root / images[min(number, len(images) - 1)] if images else path.parent
        pairs.append((path, folder))
    return pairs


def _read_rows(path: Path, columns: dict[str, str], text_type: str) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        needed = [columns["file"]]
        needed += [columns["label"]] if text_type == "asis" else []
        missing = [name for name in needed if name not in header]
        if missing:
            raise VlbenchError(
                f"{path}: missing column(s) {', '.join(missing)} (has: {', '.join(header)})"
            )
        return list(reader)


def load(root: Path, source: dict[str, Any], benchmark: dict[str, Any], where: str) -> SourceData:
    """One text per class x template (group = class); images carry their true class."""
    text_type = benchmark.get("text_type", "asis")
    if text_type not in TEXT_TYPES:
        raise VlbenchError(f"{where}: text_type must be one of {', '.join(TEXT_TYPES)}")
    columns = {**DEFAULT_COLUMNS, **source.get("columns", {})}
    files = _annotation_files(root, source, where)
    prefix_ids = len(files) > 1
    records: list[tuple[str, Path, str, str]] = []
    texts_of: dict[str, str] = {}
    conflicting = 0
    for path, folder in files:
        for number, row in enumerate(_read_rows(path, columns, text_type), start=2):
            relative = row.get(columns["file"]) or ""
            key, text = class_key(row, columns, text_type), class_text(row, columns, text_type)
            if not relative or not key:
                raise VlbenchError(f"{path}: line {number}: empty file path or class")
            conflicting += texts_of.setdefault(key, text) != text
            image_id = f"{path.stem}/{relative}" if prefix_ids else relative
            records.append((image_id, folder / relative, key, f"{path}: line {number}"))
    prompts = templates(benchmark.get("templates", "openai_imagenet"))
    classes = sorted(texts_of)
    texts = [
        (f"c{ci:05d}-t{ti:02d}", prompt(texts_of[key]), key)
        for ci, key in enumerate(classes)
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
        "n_classes_with_conflicting_texts": conflicting,
        "annotations": [
            str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
            for path, _ in files
        ],
    }
    return SourceData(images(), texts, [], info=info)


def hub_patterns(source: dict[str, Any]) -> list[str]:
    """The annotation files plus the image folders (everything with an image suffix if unnamed)."""
    annotations = _as_list(source.get("annotations"), ["metadata.csv"])
    folders = [f.strip("/") for f in _as_list(source.get("images"), []) if f.strip("./")]
    images = [f"{folder}/**" for folder in folders] or [
        "**/*.jpg",
        "**/*.jpeg",
        "**/*.JPG",
        "**/*.png",
    ]
    return [*annotations, *images]
