"""Datasets users download themselves, in miniature, in their publishers' layouts.

The importers (src/vlbench/data/importers/) turn these into the folders the shipped configs
read; each layout's source is cited in the importer modules and repeated at each writer.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import unicodedata
from pathlib import Path

from fixtures_sources import image_bytes

# --- NABirds -------------------------------------------------------------------------------
# Release layout (nabirds.py docstring): images.txt "<uuid> <4-digit class folder>/<uuid hex>.jpg",
# classes.txt "<id> <name with spaces>" including parent classes no image carries,
# image_class_labels.txt "<uuid> <id>", train_test_split.txt "<uuid> <0|1>", images/.
# The four images are the first four rows of BioCAP's nabirds/metadata.csv (the first also the
# example line public NABirds loaders quote); images.txt lists them out of file-name order.
NABIRDS = [  # (image id, class id, class name, is_training_image)
    ("0001afd4-99a1-4b23-b67f-2d3e5b8a6f10", 645, "Eared Grebe (Nonbreeding/juvenile)", 1),
    ("0000139e-21dc-4d0c-bfe1-4cae3c85c829", 817, "Oak Titmouse", 0),
    ("00019306-9d83-4334-b255-a447742edce3", 900, "Savannah Sparrow", 1),
    ("0000d9fc-4e02-4c06-a0af-a55cfb16b12b", 860, "Ovenbird", 0),
]
NABIRDS_PARENTS = [(0, "Birds"), (1, "Perching Birds")]


def nabirds_path(image_id: str, class_id: int) -> str:
    suffix = ".JPG" if image_id.startswith("0001afd4") else ".jpg"  # 35 real ones are .JPG
    return f"{class_id:04d}/{image_id.replace('-', '')}{suffix}"


def nabirds_images(per_class: int = 1) -> list[tuple[str, int, str, int]]:
    """NABIRDS, with `per_class - 1` more images (made-up UUIDs) of each of its classes."""
    extra = [
        (f"{class_id:08x}-{k:04x}-4000-8000-00000000{number:04x}", class_id, name, k % 2)
        for number, (_, class_id, name, _) in enumerate(NABIRDS)
        for k in range(1, per_class)
    ]
    return NABIRDS + extra


def write_nabirds(root: Path, per_class: int = 1) -> Path:
    """The NABirds release layout (above), `per_class` images of each of NABIRDS' classes."""
    src = root / "nabirds"
    images = nabirds_images(per_class)
    for number, (image_id, class_id, _, _) in enumerate(images):
        file = src / "images" / nabirds_path(image_id, class_id)
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(image_bytes(number))
    classes = NABIRDS_PARENTS + [(class_id, name) for _, class_id, name, _ in NABIRDS]
    files = {
        "images.txt": [f"{i} {nabirds_path(i, c)}" for i, c, _, _ in images],
        "classes.txt": [f"{class_id} {name}" for class_id, name in classes],
        "image_class_labels.txt": [f"{i} {c}" for i, c, _, _ in images],
        "train_test_split.txt": [f"{i} {train}" for i, _, _, train in images],
    }
    for name, lines in files.items():
        (src / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return src


# --- Meta-Album --------------------------------------------------------------------------
# Release layout (meta_album.py docstring; ihsaan-ullah/meta-album DataFormat/README.md and its
# example mini_insect_2): labels.csv FILE_NAME,CATEGORY,SUPER_CATEGORY, info.json naming those
# columns, images/<FILE_NAME> flat. Rows from BioCAP's FNG_Mini metadata.csv; its accented
# category is written precomposed (NFC) here and must come out decomposed (NFD) as in BioCAP's.
FUNGI = [
    ("2816361340-208034.JPG", "Amanita excelsa Gonn. & Rabenh."),
    ("2238470283-18312.JPG", "Amanita excelsa Gonn. & Rabenh."),
    ("2238359494-87452.JPG", "Agaricus impudicus (Rea) Pilát"),
    ("2238091808-6032.JPG", "Agaricus impudicus (Rea) Pilát"),
]


def write_meta_album(
    root: Path,
    columns: tuple[str, ...] = ("FILE_NAME", "CATEGORY"),
    name: str = "FNG_Mini",
    per_class: int = 2,
) -> Path:
    """One Meta-Album Mini set as released (labels.csv, info.json, flat images/); FUNGI's
    rows, then `per_class - 2` more images (made-up file names) of each of its categories."""
    src = root / name
    (src / "images").mkdir(parents=True)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*columns, "SUPER_CATEGORY"])
    categories = list(dict.fromkeys(category for _, category in FUNGI))
    extra = [
        (f"{3000000000 + 100 * c + k}-{k}.JPG", category)
        for c, category in enumerate(categories)
        for k in range(per_class - 2)
    ]
    for number, (file_name, category) in enumerate(FUNGI + extra):
        writer.writerow([file_name, unicodedata.normalize("NFC", category), ""])
        (src / "images" / file_name).write_bytes(image_bytes(10 + number))
    (src / "labels.csv").write_text(buffer.getvalue(), encoding="utf-8")
    info = {
        "dataset_name": name,
        "image_column_name": "FILE_NAME",
        "category_column_name": "CATEGORY",
        "super_category_column_name": "SUPER_CATEGORY",
        "has_super_categories": False,
    }
    (src / "info.json").write_text(json.dumps(info), encoding="utf-8")
    return src


# --- Cornell Bird and PlantID ------------------------------------------------------------
# BioCAP's CSVs (biocap_retrieval.py docstring): pandas' unnamed index, then id, source_url,
# captions, md5; images as cautious-robot names them (-n id): v1.0.0 the bare id, from v1.1.0
# the id plus the URL's extension or the Content-Type's (Cornell: .jpg; PlantID also .JPG,
# .jpeg and .aspx). Ids, URLs and captions from the real files.
CORNELL = [  # (id, source_url, caption, file name as downloaded)
    (
        "22552061",
        "https://cdn.download.ams.birds.cornell.edu/api/v1/asset/22552061/1200",
        "Aberts_Towhee, Large, ground-dwelling sparrow with a thick bill and long tail.",
        "22552061.jpg",
    ),
    (
        "402356",
        "https://cdn.download.ams.birds.cornell.edu/api/v1/asset/402356/1200",
        "Aberts_Towhee, Found in dry habitats with dense woody vegetation.",
        "402356",
    ),
]
PLANTID = [
    (
        "119",
        "http://plantid.net/General/GetPhoto.aspx?Fullpath=C:\\PlantID19\\Thumb192\\x.jpg&Size=192",
        'Pteridium aquilinum var. pubescens, The similar Sword Fern has a "thumb".',
        "119.aspx",
    ),
    (
        "903",
        "http://plantid.net/PhotoPath/Thumb192/__JB3/Microseris%20campestris%203.jpeg",
        'Microseris campestris, Pappus is a 1" dia. papery starburst.',
        "903.jpeg",
    ),
]


def write_retrieval(root: Path, csv_name: str, items: list[tuple[str, str, str, str]]) -> Path:
    images = root / "downloads"
    images.mkdir(parents=True)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["", "id", "source_url", "captions", "md5"])
    for number, (item_id, url, caption, file_name) in enumerate(items):
        data = image_bytes(20 + number)
        (images / file_name).write_bytes(data)
        writer.writerow([number, item_id, url, caption, hashlib.md5(data).hexdigest()])
    (root / csv_name).write_text(buffer.getvalue(), encoding="utf-8")
    return images
