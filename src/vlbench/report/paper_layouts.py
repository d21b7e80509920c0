"""The published tables' layouts: which reference cell each column holds, in the paper's order."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vlbench.report.reference import ReferenceMap

I2T, T2I = "image_to_text", "text_to_image"
# Few-shot rows: image queries against the centroids of each class's support images.
I2I = "image_to_image"


@dataclass(frozen=True)
class Column:
    """One table column: a reference benchmark/subset, direction, metric and cut-off.

    `parts`: the reference subsets the paper combines into this cell by their unweighted mean
    (each evaluated on its own); ours is then the mean of our rows for every part, and empty
    while one is missing. Subsets match without regard to case (INQUIRE's data spells its
    supercategories `Appearance`, the published tables `appearance`).
    """

    label: str
    benchmark: str
    subset: str
    direction: str
    metric: str
    k: int | None
    parts: tuple[str, ...] = ()


@dataclass(frozen=True)
class MeanColumn:
    """A column the paper computes as the plain mean of other columns, and its printed cell."""

    label: str
    of: tuple[str, ...]
    benchmark: str
    subset: str
    direction: str
    metric: str
    k: int | None


@dataclass(frozen=True)
class PaperLayout:
    """A published table: its key in the reference CSV, title, columns and notes."""

    table: str
    title: str
    columns: tuple[Column, ...]
    mean: MeanColumn | None = None
    notes: tuple[str, ...] = ()

    @property
    def benchmarks(self) -> set[str]:
        """Reference benchmarks the table draws on."""
        return {column.benchmark for column in self.columns}


def _recall_columns(
    prefix: str, benchmark: str, direction: str, ks: tuple[int, ...]
) -> list[Column]:
    return [Column(f"{prefix} R@{k}", benchmark, "test", direction, "recall", k) for k in ks]


BIOMEDFLICKR = PaperLayout(
    table="biomedflickr",
    title="BioMedFlickr retrieval (dataset card, reference notebook)",
    columns=tuple(
        _recall_columns("I2T", "biomedflickr", T2I, (1, 10, 100, 1000))
        + _recall_columns("T2I", "biomedflickr", I2T, (1, 10, 100, 1000))
    ),
    notes=(
        "Column names are the reference notebook's, whose direction names are swapped: its "
        "'I2T' columns are text queries against the image gallery (standard text→image) and its "
        "'T2I' columns are image queries against the caption gallery (standard image→text).",
        "Recall@k is the hit rate: a query scores when its paired item is in its top k.",
    ),
)

_ZEROSHOT_DATASETS = (
    ("NABirds", "nabirds"),
    ("Plankton", "metaalbum-plankton"),
    ("Insects", "metaalbum-insects"),
    ("Insects 2", "metaalbum-insects2"),
    ("Camera Trap", "idle-oo-camera-traps"),
    ("PlantNet", "metaalbum-plantnet"),
    ("Fungi", "metaalbum-fungi"),
    ("PlantVillage", "metaalbum-plantvillage"),
    ("Med. Leaf", "metaalbum-medleaf"),
    ("Rare Species", "rare-species"),
)
# The five balanced IDLE-OO subsets (their file names in the dataset and in BioCAP's and
# BioCLIP 2's annotation folders). Both papers' evaluation scripts (Imageomics/biocap and
# Imageomics/bioclip-2, slurm/eval*.sh) run the zero-shot evaluation once per subset, and the
# papers print one "Camera Trap" number: the unweighted mean of the five subset accuracies.
CAMERA_TRAP_SUBSETS = ("desert-lion", "ENA24", "island", "ohio-small-animals", "orinoquia")
_ZEROSHOT_COLUMNS = tuple(
    Column(
        label,
        benchmark,
        "test",
        I2T,
        "zeroshot_top1_accuracy",
        1,
        CAMERA_TRAP_SUBSETS if benchmark == "idle-oo-camera-traps" else (),
    )
    for label, benchmark in _ZEROSHOT_DATASETS
)
_ZEROSHOT_MEAN = MeanColumn(
    "Mean",
    tuple(label for label, _ in _ZEROSHOT_DATASETS),
    "mean",
    "test",
    I2T,
    "zeroshot_top1_accuracy",
    1,
)

_CAMERA_TRAP_NOTE = (
    "Camera Trap is the unweighted mean of the top-1 accuracies of the five balanced IDLE-OO "
    f"subsets ({', '.join(CAMERA_TRAP_SUBSETS)}), each evaluated with its own classes, as the "
    "papers' evaluation scripts run them."
)

# The published BioTrove-CLIP row names a repository, not a file: BioCAP's project page says
# "BioTrove-CLIP (ViT-B/16)" (github.com/Imageomics/biocap, branch gh-pages at commit
# 5807b7f12eecd61aa0f15ab4f1d3fd6929b060c6, index.html L121), BioCLIP 2's the same.
_BIOTROVE_NOTE = (
    "BioTrove-CLIP: the paper names the repository BGLab/BioTrove-CLIP, not one of its three "
    "checkpoints (from OpenAI CLIP, from BioCLIP, from MetaCLIP); a config can run each as its "
    "own row beside the one published cell; the differences show which one it matches."
)

BIOCAP_TABLE1 = PaperLayout(
    table="biocap-table1",
    title="BioCAP Table 1: zero-shot species classification, top-1 accuracy",
    columns=_ZEROSHOT_COLUMNS,
    mean=_ZEROSHOT_MEAN,
    notes=(
        "Mean is the unweighted mean of the ten dataset columns, as the paper computes it.",
        _CAMERA_TRAP_NOTE,
        _BIOTROVE_NOTE,
    ),
)

BIOCLIP2_ZEROSHOT = PaperLayout(
    table="bioclip2-zeroshot",
    title="BioCLIP 2 zero-shot species classification, top-1 accuracy (same datasets)",
    columns=_ZEROSHOT_COLUMNS,
    mean=_ZEROSHOT_MEAN,
    notes=(
        "Mean is the unweighted mean of the ten dataset columns.",
        _CAMERA_TRAP_NOTE,
        _BIOTROVE_NOTE,
    ),
)

_TABLE2_COLUMNS = (
    Column("INQUIRE Appearance", "inquire-rerank", "appearance", T2I, "average_precision", 50),
    Column("INQUIRE Behavior", "inquire-rerank", "behavior", T2I, "average_precision", 50),
    Column("INQUIRE Context", "inquire-rerank", "context", T2I, "average_precision", 50),
    Column("INQUIRE Species", "inquire-rerank", "species", T2I, "average_precision", 50),
    Column("Cornell Bird I2T", "cornell-bird", "test", I2T, "recall", 10),
    Column("Cornell Bird T2I", "cornell-bird", "test", T2I, "recall", 10),
    Column("PlantID I2T", "plantid", "test", I2T, "recall", 10),
    Column("PlantID T2I", "plantid", "test", T2I, "recall", 10),
)

BIOCAP_TABLE2 = PaperLayout(
    table="biocap-table2",
    title="BioCAP Table 2: text-image retrieval (INQUIRE-Rerank AP@50, Recall@10)",
    columns=_TABLE2_COLUMNS,
    mean=MeanColumn(
        "Mean",
        tuple(column.label for column in _TABLE2_COLUMNS),
        "biocap-table2-mean",
        "all",
        "both",
        "mean",
        0,
    ),
    notes=(
        "INQUIRE columns are INQUIRE's normalised average precision per supercategory at k = 50 "
        "(the seed's AP@50); BioCAP's code computes it over all 100 candidates, which our "
        "metric rows label k = 100.",
        "I2T = image queries against the caption gallery; T2I = caption queries against the "
        "image gallery. Mean is the unweighted mean of the eight columns.",
        _BIOTROVE_NOTE,
    ),
)

BIOVITA_UNSEEN = PaperLayout(
    table="biovita-unseen",
    title="BioVITA unseen taxa: taxon-level top-k accuracy",
    columns=tuple(
        Column(f"{level} {name} top-{k}", "biovita", subset, direction, "taxon_top_k_accuracy", k)
        for level, subset in (("Species", "unseen_species"), ("Genus", "unseen_genus"))
        for name, direction in (("I2T", I2T), ("T2I", T2I))
        for k in (1, 5, 10)
    ),
    notes=(
        "Each candidate taxon scores the max similarity over all its corpus entries; a hit when "
        "the correct taxon is among the top k candidates (ties in the candidate order).",
        "The published BioVITA numbers are read as the species level (assumed by the source).",
    ),
)

_RETRIEVAL_SETS = (("Flickr30k", "flickr30k-1k"), ("COCO", "coco-5k"))


def _retrieval_layout(
    table: str, title: str, i2t_name: str, t2i_name: str, notes: tuple[str, ...]
) -> PaperLayout:
    """Recall@1/5/10 both ways on Flickr30k and COCO, with the paper's direction names."""
    return PaperLayout(
        table=table,
        title=title,
        columns=tuple(
            column
            for name, benchmark in _RETRIEVAL_SETS
            for column in _recall_columns(f"{name} {i2t_name}", benchmark, I2T, (1, 5, 10))
            + _recall_columns(f"{name} {t2i_name}", benchmark, T2I, (1, 5, 10))
        ),
        notes=notes,
    )


OPENCLIP_RETRIEVAL = _retrieval_layout(
    "openclip-retrieval",
    "open_clip retrieval results (Flickr30k 1k test, COCO 5k test)",
    "image→text",
    "text→image",
    ("Hit-rate Recall@k; image→text scores when any of the image's captions is in the top k.",),
)

CLIP_TABLE13 = _retrieval_layout(
    "clip-paper-table13",
    "CLIP paper Table 13: zero-shot retrieval (Flickr30K 1K test, MSCOCO 5K test)",
    "Text Retrieval",
    "Image Retrieval",
    (
        "The paper names a direction by what is retrieved: 'Text Retrieval' is image→text, "
        "'Image Retrieval' is text→image. The CLIP row's model variant is not stated there.",
    ),
)

# BioCLIP's table (arXiv 2311.18803) sets zero-, one- and five-shot top-1 accuracy side by side;
# its Rare Species cells are printed on the dataset card. The paper's few-shot values of its
# other datasets could not be read from any source at hand, so only Rare Species is laid out.
_FEWSHOT_DATASETS = (("Rare Species", "rare-species"),)

BIOCLIP_FEWSHOT = PaperLayout(
    table="bioclip-fewshot",
    title="BioCLIP zero-, one- and five-shot classification, top-1 accuracy",
    columns=tuple(
        column
        for label, benchmark in _FEWSHOT_DATASETS
        for column in (
            Column(f"{label} zero-shot", benchmark, "test", I2T, "zeroshot_top1_accuracy", 1),
            Column(f"{label} one-shot", benchmark, "test", I2I, "fewshot_accuracy", 1),
            Column(f"{label} five-shot", benchmark, "test", I2I, "fewshot_accuracy", 5),
        )
    ),
    notes=(
        "One- and five-shot: BioCLIP's few_shot.py on the cached image embeddings (nearest "
        "centroid of k support images per class after centring on the support mean and L2 "
        "normalisation, mean over the folds; the interval is the t-interval over the folds).",
        "The published zero-shot column tested CLIP and OpenCLIP on common names and BioCLIP on "
        "the full taxonomic name with the common name (the dataset card's caption).",
        "The BioCLIP paper's one- and five-shot values of its other datasets could not be read "
        "from any source at hand; those columns are left out.",
    ),
)

LAYOUTS = {
    layout.table: layout
    for layout in (
        BIOMEDFLICKR,
        BIOCAP_TABLE1,
        BIOCAP_TABLE2,
        BIOCLIP2_ZEROSHOT,
        BIOVITA_UNSEEN,
        OPENCLIP_RETRIEVAL,
        CLIP_TABLE13,
        BIOCLIP_FEWSHOT,
    )
}


def layouts_for(benchmark_keys: Iterable[str], mapping: ReferenceMap) -> list[PaperLayout]:
    """The paper tables that at least one configured benchmark key contributes to."""
    references = {mapping.benchmark(key).reference for key in benchmark_keys}
    return [layout for layout in LAYOUTS.values() if layout.benchmarks & references]
