"""Importers: datasets as their publishers distribute them -> the folders the configs read.

`vlbench import <dataset> SRC DEST` runs one of them (README, "Data you download yourself").
Each importer checks the publisher's layout, fails with a one-line error naming the file and
the cause when the input is not that layout, and writes DEST all at once (output.staging).
A benchmark names its importer with the config key `importer:`, so `vlbench preflight` can
give the command that makes a missing folder. One module per publisher layout:
`nabirds`, `meta_album`, `biocap_retrieval` (Cornell Bird and PlantID share BioCAP's layout).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from vlbench.data.importers.biocap_retrieval import import_retrieval
from vlbench.data.importers.meta_album import import_meta_album
from vlbench.data.importers.nabirds import import_nabirds
from vlbench.data.importers.output import ImportResult

BIOCAP_FILES = "github.com/Imageomics/biocap"


@dataclass(frozen=True)
class Option:
    """An option of one importer's command; `value` is the placeholder a hint shows."""

    flag: str
    help: str
    value: str | None = None  # None: a switch
    required: bool = False

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class Importer:
    """One dataset's importer: what SRC is, where to get it, and the function that runs."""

    name: str
    dataset: str
    src: str
    get: str
    run: Callable[..., ImportResult]
    options: tuple[Option, ...] = ()

    def command(self, dest: str) -> str:
        """The command that makes `dest`, with SRC as a placeholder."""
        required = "".join(
            f" {option.flag} {option.value}" for option in self.options if option.required
        )
        return f"vlbench import {self.name} SRC {dest}{required}"


METADATA = Option(
    "--metadata",
    "BioCAP's metadata.csv of this dataset: every row must match, and the rows take its order",
    value="metadata.csv",
)
REPLACE = Option("--replace", "replace DEST if it exists (only once the new folder is complete)")
COPY = Option("--copy", "copy the images instead of hard-linking them")


def _retrieval(name: str, title: str, csv_name: str, where: str) -> Importer:
    return Importer(
        name=name,
        dataset=title,
        src=f"the folder the images were downloaded into (cautious-robot -o), "
        f"with --annotations BioCAP's {csv_name}",
        get=f"{BIOCAP_FILES}, file data/retrieval_annotations/{csv_name}; images from {where} by "
        "their source_url (BioCAP-pipeline.md: cautious-robot -n id -u source_url -v md5)",
        run=functools.partial(import_retrieval, name),
        options=(
            Option("--annotations", f"BioCAP's {csv_name}", value=csv_name, required=True),
            Option(
                "--allow-other-annotations",
                "accept an annotation CSV other than BioCAP's published one",
            ),
        ),
    )


IMPORTERS: dict[str, Importer] = {
    "nabirds": Importer(
        name="nabirds",
        dataset="NABirds",
        src="the extracted nabirds/ folder (images.txt, classes.txt, ..., images/)",
        get="dl.allaboutbirds.org/nabirds (Cornell Lab; registration, non-commercial terms)",
        run=import_nabirds,
        options=(METADATA,),
    ),
    "meta-album": Importer(
        name="meta-album",
        dataset="Meta-Album Mini (PLK, INS, INS_2, PLT_NET, FNG, PLT_VIL, MED_LF)",
        src="one Mini release folder (labels.csv, info.json, images/)",
        get="OpenML, ids on meta-album.github.io: PLK 44282, INS 44306, INS_2 44292, "
        "PLT_NET 44293, FNG 44302, PLT_VIL 44286, MED_LF 44299",
        run=import_meta_album,
        options=(METADATA,),
    ),
    "cornell-bird": _retrieval(
        "cornell-bird", "Cornell Bird", "cornell_bird.csv", "macaulaylibrary.org"
    ),
    "plantid": _retrieval("plantid", "PlantID", "plantID.csv", "plantid.net"),
}
COMMON_OPTIONS = (REPLACE, COPY)
