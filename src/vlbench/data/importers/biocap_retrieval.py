"""Cornell Bird and PlantID: BioCAP's annotation CSV + the images its users download.

The publisher is BioCAP itself (github.com/Imageomics/biocap, commit 6e589bef): the images are
not redistributed; `data/retrieval_annotations/cornell_bird.csv` (7,007 rows, Macaulay
Library assets, `https://cdn.download.ams.birds.cornell.edu/api/v1/asset/<id>/1200`) and
`data/retrieval_annotations/plantID.csv` (2,349 rows, plantid.net; note the capital ID) list
each image with `id, source_url, captions, md5` after pandas' unnamed index column
(`BioCAP-pipeline.md`, "Text-to-Image Retrieval Benchmarks"). Ids are unique integers; md5
values are unique in cornell_bird.csv, not in plantID.csv (2,314 distinct: some photographs
are listed under several ids and captions).

How users get the images: `BioCAP-pipeline.md` says to run cautious-robot
(github.com/Imageomics/cautious-robot) as
`cautious-robot -i cornell_bird.csv -o <images folder> -n id -u source_url -v md5`. It saves
each image in one flat folder named by the id column; the extension depends on its version
(its `src/cautiousrobot/download.py`):
- v1.0.0 and earlier: the id as it is, no extension (`22552061`);
- from v1.1.0 (commit 332a9eb4, 2025-09-25, "Change set required for functionality with
  Cornell Birds CSV"): the id plus the URL path's extension, else the one `mimetypes` gives for
  the response's Content-Type. Cornell Bird URLs end in `/1200` (no extension), so their
  files get `.jpg` from `image/jpeg`; PlantID URLs end in `.jpg` (2,256), `.JPG` (37), `.jpeg`
  (7) or `.aspx` (49, `GetPhoto.aspx?...`), and their files keep that extension.

What BioCAP's evaluation reads (`train_and_eval/evaluation/retrieval_openclip.py`,
`CustomDataset`): `pd.read_csv(csv_file)` rows in file order, the image
`os.path.join(image_folder, f"{id}.jpg")`, the text `f"a photo of{caption}"`. So this
importer finds each row's file by its id (the bare id or the id plus any one extension),
checks its md5 against the CSV, and writes DEST/<BioCAP's CSV name> (the CSV byte for byte)
and DEST/images/<id>.jpg, the layout `config/biocap.yaml` reads. The CSV must be BioCAP's file
(sha256 pinned) unless `allow_other_annotations` is set. A missing column (with the columns
present), an id listed twice, an image absent or ambiguous (two files for one id), or an md5
mismatch is a one-line error naming the file, the id and how many more; nothing is written
then.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from vlbench.data.importers.biocap_files import COMMIT, SHA256
from vlbench.data.importers.output import ImportResult, sha256, staging
from vlbench.data.importers.reading import read_csv, require_file, require_folder, several
from vlbench.errors import VlbenchError

COLUMNS = ("id", "source_url", "captions", "md5")
IMAGES = "images"


@dataclass(frozen=True)
class RetrievalSet:
    """One of BioCAP's retrieval benchmarks: its CSV's name in BioCAP's repository."""

    annotations: str

    @property
    def pinned_sha256(self) -> str:
        return SHA256[f"data/retrieval_annotations/{self.annotations}"]


SETS = {"cornell-bird": RetrievalSet("cornell_bird.csv"), "plantid": RetrievalSet("plantID.csv")}


def _files_by_id(folder: Path) -> dict[str, list[Path]]:
    """Files of a flat download folder by the id they were named after (with or without an
    extension)."""
    found: dict[str, list[Path]] = defaultdict(list)
    for entry in sorted(folder.iterdir()):
        if entry.is_file() and not entry.name.startswith("."):
            stem = entry.name.rsplit(".", 1)[0] if "." in entry.name else entry.name
            found[stem].append(entry)
    return found


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _check_annotations(name: str, annotations: Path, data: bytes, allow_other: bool) -> None:
    pinned = SETS[name].pinned_sha256
    if not allow_other and sha256(data) != pinned:
        raise VlbenchError(
            f"{annotations}: sha256 {sha256(data)[:12]}... is not that of BioCAP's "
            f"{SETS[name].annotations} at commit {COMMIT[:8]} ({pinned[:12]}...); pass "
            "--allow-other-annotations to import another version"
        )


def retrieval_rows(src: Path, annotations: Path) -> list[tuple[str, Path]]:
    """(id, image file) of every row of the annotation CSV, each file found and md5-checked."""
    require_file(annotations, "the annotation CSV, given with --annotations")
    folder = require_folder(Path(src), "the folder the images were downloaded into")
    rows = read_csv(annotations, COLUMNS)
    by_id = _files_by_id(folder)
    seen: set[str] = set()
    found, absent, ambiguous, wrong = [], [], [], []
    for number, row in enumerate(rows, start=2):
        item_id = row["id"].strip()
        if not item_id or "/" in item_id:
            raise VlbenchError(f"{annotations}: line {number}: id {item_id!r} is not a plain name")
        if item_id in seen:
            raise VlbenchError(f"{annotations}: line {number}: id {item_id} is listed twice")
        seen.add(item_id)
        files = by_id.get(item_id, [])
        if not files:
            absent.append(item_id)
        elif len(files) > 1:
            ambiguous.append(f"{item_id} ({', '.join(file.name for file in files)})")
        elif (actual := _md5(files[0])) != row["md5"].strip().lower():
            wrong.append(f"{files[0].name}: md5 {actual}, published {row['md5']}")
        else:
            found.append((item_id, files[0]))
    total = len(rows)
    if absent:
        raise VlbenchError(
            f"{folder}: {len(absent)} of {total} images listed in {annotations.name} are "
            f"absent (ids {several(absent)}; expected <id> or <id>.<extension>)"
        )
    if ambiguous:
        raise VlbenchError(f"{folder}: several files for id {several(ambiguous)}")
    if wrong:
        raise VlbenchError(
            f"{folder}: {len(wrong)} of {total} images do not match their published md5 "
            f"({several(wrong)})"
        )
    if not found:
        raise VlbenchError(f"{annotations}: no rows")
    return found


def import_retrieval(
    name: str,
    src: Path,
    dest: Path,
    *,
    annotations: Path,
    allow_other_annotations: bool = False,
    replace: bool = False,
    copy: bool = False,
) -> ImportResult:
    """Write DEST/<BioCAP's CSV name> and DEST/images/<id>.jpg for Cornell Bird or PlantID."""
    annotations = Path(annotations)
    require_file(annotations, "the annotation CSV, given with --annotations")
    data = annotations.read_bytes()
    _check_annotations(name, annotations, data, allow_other_annotations)
    rows = retrieval_rows(src, annotations)
    with staging(Path(dest), replace, copy) as stage:
        for item_id, file in rows:
            stage.place_image(file, f"{IMAGES}/{item_id}.jpg")
        stage.write_bytes(SETS[name].annotations, data)
    if sha256(data) == SETS[name].pinned_sha256:
        stage.result.notes.append(
            f"{SETS[name].annotations} is BioCAP's file (commit {COMMIT[:8]}); every image "
            "matches its md5."
        )
    else:
        stage.result.notes.append(
            f"{SETS[name].annotations} is not BioCAP's file (--allow-other-annotations); every "
            "image matches its md5."
        )
    return stage.result
