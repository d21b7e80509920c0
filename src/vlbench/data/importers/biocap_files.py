"""BioCAP's own annotation files: the definition of what its evaluation read.

BioCAP's repository (github.com/Imageomics/biocap) ships, at commit
6e589bef9503c8ff0f4f4580365cdd6367d50b38 (2025-10-24; the files last changed in b0343a27), the
exact files its zero-shot and retrieval evaluation read (its `slurm/eval_zero_shot.sh`,
`slurm/eval_retrieval.sh`): `data/classification_annotation/nabirds/metadata.csv`,
`data/classification_annotation/meta-album/<SET>_Mini/metadata.csv`, and
`data/retrieval_annotations/cornell_bird.csv` and `plantID.csv`. Their sha256 are pinned here,
so an import can say whether it reproduced BioCAP's file byte for byte, and a user holding
BioCAP's file can have the import checked against it row by row (`--metadata`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from vlbench.data.importers.reading import read_csv, require_file
from vlbench.errors import VlbenchError

REPOSITORY = "github.com/Imageomics/biocap"
COMMIT = "6e589bef9503c8ff0f4f4580365cdd6367d50b38"
CLASSIFICATION = "data/classification_annotation"
SHA256 = {
    f"{CLASSIFICATION}/nabirds/metadata.csv": (
        "664d0433d1ce256eb6ce7441ac7656f9835991a4eabc3717b0778dc42f5682a1"
    ),
    f"{CLASSIFICATION}/meta-album/PLK_Mini/metadata.csv": (
        "9cf10b0aa8a0355cfa40bbf1b49f448fb2523ef1624770a6a2c2482451223a2e"
    ),
    f"{CLASSIFICATION}/meta-album/INS_Mini/metadata.csv": (
        "a3bee2f00772e3bd7520647ec006fe78f7525712fbd2e48105903595900d5ece"
    ),
    f"{CLASSIFICATION}/meta-album/INS_2_Mini/metadata.csv": (
        "52f2f3adb3df09d507e09679728ea2c6d8472123a418399303f30a82b22cc3ec"
    ),
    f"{CLASSIFICATION}/meta-album/PLT_NET_Mini/metadata.csv": (
        "0b04531a6f146e021a9f393dc922e79bed8d63566335ef0511a6c0b08d5e4e05"
    ),
    f"{CLASSIFICATION}/meta-album/FNG_Mini/metadata.csv": (
        "e4f231572c2bc59c00bbb5708572249b064b3e53c057da290b58930e87f8ac3b"
    ),
    f"{CLASSIFICATION}/meta-album/PLT_VIL_Mini/metadata.csv": (
        "7def817fb573de45d8128adc458725c1613a02526d74113672dbeda53521b22e"
    ),
    f"{CLASSIFICATION}/meta-album/MED_LF_Mini/metadata.csv": (
        "21f14cc8432492c42fce6c4a4dc74dd850c38e27fea561b5f84712051b16608f"
    ),
    "data/retrieval_annotations/cornell_bird.csv": (
        "54d4f93c358083118f90fbcd7ee4b87a169fdfaba8e03290dea6e2ce8e30fad2"
    ),
    "data/retrieval_annotations/plantID.csv": (
        "4ea37e7954bb1fae9bda303c8d2d1681db368b67fd7ac25c78aa37fafb39ce3e"
    ),
}


def same_as_biocap(digest: str, prefix: str) -> str:
    """A sentence saying whether a written file equals one of BioCAP's files under `prefix`."""
    for path, pinned in SHA256.items():
        if path.startswith(prefix) and pinned == digest:
            return f"Byte-identical to BioCAP's {path} (commit {COMMIT[:8]})."
    return (
        f"Not byte-identical to BioCAP's {prefix}... files (commit {COMMIT[:8]}): pass "
        "--metadata <BioCAP's metadata.csv> to see the first row that differs."
    )


def order_like_biocap(
    rows: Sequence[tuple[str, str]], metadata: Path, produced_from: str
) -> list[tuple[str, str]]:
    """`rows` (filepath, class) in the order of BioCAP's metadata.csv, which must hold exactly
    the same rows; otherwise a one-line error naming the first difference."""
    require_file(metadata, "BioCAP's metadata.csv, given with --metadata")
    theirs = [(row["filepath"], row["class"]) for row in read_csv(metadata, ["filepath", "class"])]
    ours = dict(rows)
    if len(ours) != len(rows):
        raise VlbenchError(f"{produced_from}: a file path is listed twice")
    for number, (filepath, label) in enumerate(theirs, start=2):
        if filepath not in ours:
            raise VlbenchError(
                f"{metadata}: line {number}: {filepath!r} is not in {produced_from} "
                f"({len(theirs)} rows there, {len(rows)} here)"
            )
        if ours[filepath] != label:
            raise VlbenchError(
                f"{metadata}: line {number}: {filepath!r} has class {label!r}, "
                f"{produced_from} gives {ours[filepath]!r}"
            )
    if len(theirs) != len(rows):
        extra = sorted(set(ours) - {filepath for filepath, _ in theirs})
        raise VlbenchError(
            f"{metadata}: {len(rows) - len(theirs)} row(s) of {produced_from} are not there "
            f"(first: {extra[0]!r})"
            if extra
            else f"{metadata}: a file path is listed twice"
        )
    return theirs
