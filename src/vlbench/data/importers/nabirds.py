"""NABirds as the Cornell Lab distributes it -> the folder BioCAP's zero-shot evaluation reads.

The publisher's layout (the `nabirds` folder of the tarball from dl.allaboutbirds.org/nabirds,
which needs registration; its own README could not be read here, so the layout comes from the
public code that reads it: the directory tree in github.com/demidovd98/sm-vit docs/DATASET.md,
the parsing helpers (`load_class_names`, `load_image_paths`, ...) that many projects share,
e.g. github.com/reidarwood/ML-Capstone data_helpers.py, and the docstring of a NABirds-to-TFRecord
converter found by the code search, repository not identified, that quotes one line per file):

- `images.txt`: `<image_id> <path>` per image, the id a UUID with dashes, the path relative
  to `images/` and made of a 4-digit zero-padded class folder and the UUID without dashes:
  `0000139e-21dc-4d0c-bfe1-4cae3c85c829 0817/0000139e21dc4d0cbfe14cae3c85c829.jpg`;
- `classes.txt`: `<class_id> <class name>`, the name running to the end of the line and
  holding spaces (`37 Barn Owl`); it also lists the parent classes of the hierarchy, which no
  image carries ("not all of them are represented in the image data");
- `image_class_labels.txt`: `<image_id> <class_id>` (`0000139e-... 817`, ids not zero-padded);
- `train_test_split.txt`: `<image_id> <is_training_image>` (1 train, 0 test);
- `images/<path>`: the photographs. (The release also has bounding boxes, parts, sizes,
  hierarchy and photographer files, which the evaluation does not use.)

What BioCAP evaluated (its `data/classification_annotation/nabirds/metadata.csv` at commit
6e589bef, read by `DatasetFromFile` in `train_and_eval/evaluation/data.py` with
`--data_root .../nabird/images/` in `slurm/eval_zero_shot.sh`, `--text_type asis`):

- 48,562 rows over 555 classes: every image of the release, both splits (the NABirds paper's
  count, "48,562 images of North American birds with 555 categories", as quoted by the
  `gjuggler/bird-data` loader on the Hugging Face hub). `train_test_split.txt` is therefore
  only checked for consistency here, not used to select images.
- `filepath` is the images.txt path verbatim (`0817/0000139e21dc4d0cbfe14cae3c85c829.jpg`,
  relative to `images/`; 35 of them end in `.JPG`); each of the 555 class folders holds one class.
- `class` is the classes.txt name of the image's image_class_labels.txt class, verbatim
  (`Oak Titmouse`, `Eared Grebe (Nonbreeding/juvenile)`, `Abert's Towhee`).
- Rows are in ascending order of file name (checked on all 48,562; file names are the image
  UUIDs, so this is also id order, and the first row is the first images.txt line quoted
  above). Whether images.txt itself is in that order was not verified, so rows are sorted.
- The file is pandas' `to_csv()` output: a leading unnamed index column, then
  `filepath,class`.

The result: DEST/metadata.csv (byte-for-byte BioCAP's file when the inputs are the published
release; the summary says whether it is) and DEST/<filepath> for every image, which is the
layout `config/biocap.yaml` reads (`path: {data_root}/nabirds`, metadata.csv beside the class
folders). Any id missing from a file, a class id without a name, a malformed line or an
image listed but absent is a one-line error; nothing is written then.
"""

from __future__ import annotations

import functools
from pathlib import Path

from vlbench.data.importers.biocap_files import CLASSIFICATION
from vlbench.data.importers.output import import_class_folders
from vlbench.data.importers.reading import (
    read_pairs,
    require_file,
    require_folder,
    safe_relative,
    several,
    unique_mapping,
)
from vlbench.errors import VlbenchError

LAYOUT = "the NABirds release: images.txt, classes.txt, image_class_labels.txt, "
LAYOUT += "train_test_split.txt and images/"
LAYOUT_FILES = ("images.txt", "classes.txt", "image_class_labels.txt", "train_test_split.txt")
SPLIT_VALUES = ("0", "1")


def _check_same_ids(images: dict[str, str], path: Path, other: dict[str, str]) -> None:
    missing = [image_id for image_id in images if image_id not in other]
    extra = [image_id for image_id in other if image_id not in images]
    if missing:
        raise VlbenchError(f"{path}: no line for {len(missing)} image(s) ({several(missing)})")
    if extra:
        raise VlbenchError(f"{path}: {len(extra)} id(s) not in images.txt ({several(extra)})")


def nabirds_rows(src: Path) -> list[tuple[str, str, Path]]:
    """(filepath, class, image file) of every image of a NABirds release, checked."""
    src = require_folder(Path(src), LAYOUT)
    files = {name: require_file(src / name, LAYOUT) for name in LAYOUT_FILES}
    images_path = files["images.txt"]
    image_pairs = read_pairs(images_path)
    images = unique_mapping(images_path, image_pairs)
    lines = {image_id: number for image_id, _, number in image_pairs}
    classes = unique_mapping(files["classes.txt"], read_pairs(files["classes.txt"], True))
    labels_path = files["image_class_labels.txt"]
    labels = unique_mapping(labels_path, read_pairs(labels_path))
    split_path = files["train_test_split.txt"]
    split = unique_mapping(split_path, read_pairs(split_path))
    for path, mapping in ((labels_path, labels), (split_path, split)):
        _check_same_ids(images, path, mapping)
    unnamed = sorted({labels[i] for i in images if labels[i] not in classes}, key=str)
    if unnamed:
        raise VlbenchError(
            f"{files['classes.txt']}: no name for class id(s) {several(unnamed)} "
            f"used in {labels_path.name}"
        )
    odd = [image_id for image_id, value in split.items() if value not in SPLIT_VALUES]
    if odd:
        raise VlbenchError(f"{split_path}: values other than 0/1 for {several(odd)}")
    folder = require_folder(src / "images", LAYOUT)
    rows, absent = [], []
    for image_id, relative in images.items():
        relative = safe_relative(relative, images_path, lines[image_id])
        file = folder / relative
        if not file.is_file():
            absent.append(relative)
        rows.append((relative, classes[labels[image_id]], file))
    if absent:
        raise VlbenchError(
            f"{folder}: {len(absent)} image(s) listed in images.txt are absent ({several(absent)})"
        )
    rows.sort(key=lambda row: row[0].rsplit("/", 1)[-1])
    return rows


# import_nabirds(src, dest, *, metadata=None, replace=False, copy=False) writes
# DEST/metadata.csv and DEST/<class folder>/<image> from a NABirds release.
import_nabirds = functools.partial(
    import_class_folders, nabirds_rows, "images.txt", f"{CLASSIFICATION}/nabirds/"
)
