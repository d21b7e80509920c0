"""A Meta-Album Mini dataset as released -> the folder BioCAP's zero-shot evaluation reads.

The publisher's layout: Meta-Album (meta-album.github.io, repository
github.com/meta-album/meta-album.github.io at 2148dc02; code github.com/ihsaan-ullah/meta-album
at 5209129) releases every dataset on OpenML (Mini ids, from the OpenML tables of the pages
`datasets/<SET>.html`: PLK 44282 and PLT_VIL 44286 (Meta-Album set 0), INS_2 44292, PLT_NET
44293 and MED_LF 44299 (set 1), INS 44306 and FNG 44302 (set 2);
`openml.datasets.get_dataset(ID, download_all_files=True)` as the site's download instructions
say), each as one folder in the format of ihsaan-ullah/meta-album `DataFormat/README.md`:

- `labels.csv` with at least `FILE_NAME`, `CATEGORY`, `SUPER_CATEGORY` (other names are
  allowed when `info.json` gives them as `image_column_name`, `category_column_name`; Meta-Album's
  own loader, `Code/DataLoader/data_loader_standard.py`, reads them from there, and so does
  this importer when `info.json` is present);
- `info.json`;
- `images/<FILE_NAME>`: one flat folder of all images.

What BioCAP evaluated (its `data/classification_annotation/meta-album/<SET>_Mini/metadata.csv` at
commit 6e589bef, `--text_type asis`, images read from `.../meta-album/set<k>/<SET>_Mini/val/`):

- every image of the Mini set, 40 per class: PLK 3,440 in 86 classes, INS 4,160 / 104,
  INS_2 4,080 / 102, PLT_NET 1,000 / 25, FNG 1,000 / 25, PLT_VIL 1,520 / 38, MED_LF 1,000 / 25
  (counted in BioCAP's files; Mini versions hold 40 images per class, e.g. the `mini_version`
  of Meta-Album's `assets/files/info/PLK_info.json`: 86 categories, 3,440 images);
- `filepath` is `<CATEGORY>/<FILE_NAME>` and `class` is `<CATEGORY>`: BioCAP's `val/` folder has
  one subfolder per category, a layout the release does not have (how BioCAP made it is not
  published). Every class string equals its folder name; underscores, spaces and parentheses
  are kept verbatim (`Emiliania_huxleyi`, `Tomato___Late_blight`, `Piper Betle (Betel)`);
- the 36 non-ASCII class strings (34 in INS, 2 in FNG) are in Unicode NFD form, accents as
  combining marks (`Pila\\u0301t`), as a macOS file system writes folder names; one INS category
  carries mojibake (`CharanÃ§ons` for `Charançons`), which NFD writes `CharanA\\u0303\\xa7ons`.
  Whether labels.csv holds NFC or NFD could not be checked here (a third-party build script
  found by the code search reports NFC in labels.csv against NFD folder names for INS_Mini and
  FNG_Mini), so the class and folder are written NFD, which gives BioCAP's bytes either way;
- rows grouped by class, classes in no sorted order: read here as the labels.csv order (not
  verified against a real labels.csv), so the rows keep it;
- pandas' `to_csv()` layout: a leading unnamed index column, then `filepath,class`.

The result: DEST/metadata.csv and DEST/<class>/<FILE_NAME>, the layout `config/biocap.yaml`
reads (`path: {data_root}/meta-album/<SET>`). The summary says whether metadata.csv is
byte-identical to one of BioCAP's seven files; with `--metadata` (BioCAP's file of that set) a
row that differs is an error, and the rows take BioCAP's order. A missing column (with the
columns present), an empty or path-like value, a file listed twice or absent from `images/`,
or two categories that become one under NFD is a one-line error; nothing is written then.
"""

from __future__ import annotations

import functools
import json
import unicodedata
from pathlib import Path

from vlbench.data.importers.biocap_files import CLASSIFICATION
from vlbench.data.importers.output import import_class_folders
from vlbench.data.importers.reading import (
    read_csv,
    read_text,
    require_file,
    require_folder,
    several,
)
from vlbench.errors import VlbenchError

LAYOUT = "a Meta-Album release folder: labels.csv, info.json and images/"
DEFAULT_COLUMNS = {"image_column_name": "FILE_NAME", "category_column_name": "CATEGORY"}


def _columns(src: Path) -> tuple[str, str]:
    """The file-name and category columns: info.json's names, else Meta-Album's defaults."""
    names = dict(DEFAULT_COLUMNS)
    info = src / "info.json"
    if info.is_file():
        try:
            found = json.loads(read_text(info))
        except json.JSONDecodeError as exc:
            raise VlbenchError(f"{info}: not valid JSON ({exc.msg}, line {exc.lineno})") from exc
        if not isinstance(found, dict):
            raise VlbenchError(f"{info}: expected a JSON object")
        for key in names:
            if isinstance(found.get(key), str) and found[key]:
                names[key] = found[key]
    return names["image_column_name"], names["category_column_name"]


def _plain_name(value: str, labels: Path, number: int, column: str) -> str:
    if not value or value != value.strip() or "/" in value or value in (".", ".."):
        raise VlbenchError(f"{labels}: line {number}: {column} {value!r} is not a plain name")
    return value


def meta_album_rows(src: Path) -> list[tuple[str, str, Path]]:
    """(filepath, class, image file) of every image of a Meta-Album release folder, checked."""
    src = require_folder(Path(src), LAYOUT)
    labels = require_file(src / "labels.csv", LAYOUT)
    file_column, category_column = _columns(src)
    images = require_folder(src / "images", LAYOUT)
    rows, absent, seen, categories = [], [], set(), {}
    for number, row in enumerate(read_csv(labels, [file_column, category_column]), start=2):
        name = _plain_name(row[file_column], labels, number, file_column)
        category = _plain_name(row[category_column], labels, number, category_column)
        if name in seen:
            raise VlbenchError(f"{labels}: line {number}: {name!r} is listed twice")
        seen.add(name)
        label = unicodedata.normalize("NFD", category)
        if categories.setdefault(label, category) != category:
            raise VlbenchError(
                f"{labels}: line {number}: categories {categories[label]!r} and {category!r} "
                "differ only in Unicode normalisation"
            )
        if not (images / name).is_file():
            absent.append(name)
        rows.append((f"{label}/{name}", label, images / name))
    if not rows:
        raise VlbenchError(f"{labels}: no rows")
    if absent:
        raise VlbenchError(
            f"{images}: {len(absent)} image(s) listed in labels.csv are absent ({several(absent)})"
        )
    return rows


# import_meta_album(src, dest, *, metadata=None, replace=False, copy=False) writes
# DEST/metadata.csv and DEST/<class>/<image> from one Meta-Album release folder.
import_meta_album = functools.partial(
    import_class_folders, meta_album_rows, "labels.csv", f"{CLASSIFICATION}/meta-album/"
)
