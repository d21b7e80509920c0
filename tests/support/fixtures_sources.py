"""Builders of every benchmark source layout in miniature, exactly as the real sources lay out.

Each writer creates small random images and the real file names, columns, card configs and
archive structures, so the loaders run on them unchanged. Reused by hardening tests: each
builder takes `corrupt` (ids whose image bytes are made undecodable) where that makes sense.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import tarfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from vlbench.data.sources.hf_parquet import read_paired_files
from vlbench.data.sources.writer import write_canonical

IMAGE_STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
BROKEN = b"\xff\xd8\xff\xe0 this is not really a jpeg"


def image_bytes(seed: int, fmt: str = "JPEG", size: tuple[int, int] = (40, 32)) -> bytes:
    """A small random picture encoded as `fmt`."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


def hf_features(features: dict[str, Any]) -> dict[bytes, bytes]:
    """The `huggingface` schema metadata `datasets` writes into parquet files."""
    return {b"huggingface": json.dumps({"info": {"features": features}}).encode()}


def write_parquet(path: Path, table: pa.Table, features: dict[str, Any]) -> None:
    """Write `table` with the datasets feature metadata, as hub parquet shards are."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata(hf_features(features)), path)


def card(configs: list[tuple[str, list[tuple[str, str]]]], extra: str = "") -> str:
    """A README.md with YAML front matter declaring `configs` [(name, [(split, path)])]."""
    lines = ["---", "license: other", extra.rstrip(), "configs:"]
    for name, files in configs:
        lines += [f"- config_name: {name}", "  data_files:"]
        for split, path in files:
            lines += [f"  - split: {split}", f"    path: {path}"]
    return "\n".join(line for line in lines if line) + "\n---\n\n# Miniature test copy\n"


VALUE = {"dtype": "string", "_type": "Value"}


# --- BioMedFlickr: see vlbench.data.synthetic.write_synthetic_biomedflickr (the same layout) ---


# --- BioVITAI2TRetrieval --------------------------------------------------------------------

GENERA = ["Panthera", "Vulpes", "Corvus", "Rana", "Salmo", "Apis"]


def candidate_taxa(rng: np.random.Generator, taxa: list[str], q: int) -> tuple[str, list[str]]:
    """Query q's correct taxon and its candidate taxa: it and three others, shuffled."""
    correct = taxa[q % len(taxa)]
    others = [t for t in taxa if t != correct]
    chosen = [correct, *rng.choice(others, size=3, replace=False).tolist()]
    return correct, [chosen[i] for i in rng.permutation(len(chosen))]


def biovita_subset(subset: str, n_queries: int, seed: int) -> dict[str, Any]:
    """Rows of the four configs of one BioVITA subset (genus names repeat, as in the real one)."""
    rng = np.random.default_rng(seed)
    corpus = []
    for g, genus in enumerate(GENERA):
        for s in range(2):
            taxon = f"{genus} sp{s}" if subset == "unseen_species" else genus
            corpus.append({"id": f"{subset}-d{g}{s}", "text": taxon, "taxon": taxon})
    taxa = list(dict.fromkeys(row["taxon"] for row in corpus))
    queries, qrels, ranked = [], [], []
    for q in range(n_queries):
        correct, order = candidate_taxa(rng, taxa, q)
        query_id = f"{subset}-q{q:03d}"
        queries.append(
            {
                "image": {"bytes": image_bytes(seed * 1000 + q), "path": f"{query_id}.jpg"},
                "id": query_id,
                "correct_taxon": correct,
                "candidate_taxa": order,
            }
        )
        for row in corpus:
            if row["taxon"] == correct:
                qrels.append({"query-id": query_id, "corpus-id": row["id"], "score": 1})
        ranked.append(
            {"query-id": query_id, "corpus-ids": [r["id"] for r in corpus if r["taxon"] in order]}
        )
    return {"corpus": corpus, "queries": queries, "qrels": qrels, "top_ranked": ranked}


BIOVITA_FEATURES = {
    "corpus": {"id": VALUE, "text": VALUE, "taxon": VALUE},
    "queries": {
        "image": {"_type": "Image"},
        "id": VALUE,
        "correct_taxon": VALUE,
        "candidate_taxa": {"feature": VALUE, "_type": "List"},
    },
    "qrels": {"query-id": VALUE, "corpus-id": VALUE, "score": {"dtype": "int64", "_type": "Value"}},
    "top_ranked": {"query-id": VALUE, "corpus-ids": {"feature": VALUE, "_type": "List"}},
}
BIOVITA_SCHEMAS = {
    "corpus": pa.schema([("id", pa.string()), ("text", pa.string()), ("taxon", pa.string())]),
    "queries": pa.schema(
        [
            ("image", IMAGE_STRUCT),
            ("id", pa.string()),
            ("correct_taxon", pa.string()),
            ("candidate_taxa", pa.list_(pa.string())),
        ]
    ),
    "qrels": pa.schema(
        [("query-id", pa.string()), ("corpus-id", pa.string()), ("score", pa.int64())]
    ),
    "top_ranked": pa.schema([("query-id", pa.string()), ("corpus-ids", pa.list_(pa.string()))]),
}


def _write_mteb_repo(
    root: Path,
    subset_rows: Any,
    n_queries: int,
    seed: int,
    schemas: dict[str, pa.Schema],
    features: dict[str, Any],
) -> dict[str, Any]:
    """A BioVITA repo as mteb's tasks read it: `{subset}-{part}/test-*.parquet` per subset."""
    configs, rows = [], {}
    for number, subset in enumerate(("unseen_genus", "unseen_species")):
        rows[subset] = subset_rows(subset, n_queries, seed + number)
        for part in ("corpus", "qrels", "queries", "top_ranked"):
            name = f"{subset}-{part}"
            configs.append((name, [("test", f"{name}/test-*")]))
            table = pa.Table.from_pylist(rows[subset][part], schema=schemas[part])
            write_parquet(root / name / "test-00000-of-00001.parquet", table, features[part])
    (root / "README.md").write_text(card(configs, "tags:\n- mteb"), encoding="utf-8")
    return rows


def write_biovita_repo(root: Path, n_queries: int = 12, seed: int = 0) -> dict[str, Any]:
    """The MTEB BioVITAI2TRetrieval repo: `{subset}-{part}/test-*.parquet` for both subsets."""
    return _write_mteb_repo(
        root, biovita_subset, n_queries, seed, BIOVITA_SCHEMAS, BIOVITA_FEATURES
    )


def biovita_t2i_subset(subset: str, n_queries: int, seed: int) -> dict[str, Any]:
    """Rows of the four configs of one BioVITAT2IRetrieval subset: taxon-name queries, image
    corpus (several images per taxon, so a taxon scores the max over its images)."""
    rng = np.random.default_rng(seed)
    corpus = []
    for g, genus in enumerate(GENERA):
        for s in range(2):
            taxon = f"{genus} sp{s}" if subset == "unseen_species" else genus
            for i in range(2):
                image_id = f"{subset}-i{g}{s}{i}"
                corpus.append(
                    {
                        "id": image_id,
                        "image": {
                            "bytes": image_bytes(seed * 1000 + 100 + 4 * g + 2 * s + i),
                            "path": f"{image_id}.jpg",
                        },
                        "taxon": taxon,
                    }
                )
    taxa = list(dict.fromkeys(row["taxon"] for row in corpus))
    queries, qrels, ranked = [], [], []
    for q in range(n_queries):
        correct, order = candidate_taxa(rng, taxa, q)
        query_id = f"{subset}-q{q:03d}"
        # As the construction script selects them: the text index's `text` (the bare taxon name
        # at the subset's level) under the task's query id.
        queries.append(
            {"text": correct, "id": query_id, "correct_taxon": correct, "candidate_taxa": order}
        )
        for row in corpus:
            if row["taxon"] == correct:
                qrels.append({"query-id": query_id, "corpus-id": row["id"], "score": 1})
        groups = [[r["id"] for r in corpus if r["taxon"] == taxon] for taxon in order]
        ranked.append({"query-id": query_id, "corpus-ids": [i for group in groups for i in group]})
    return {"corpus": corpus, "queries": queries, "qrels": qrels, "top_ranked": ranked}


BIOVITA_T2I_FEATURES = {
    **BIOVITA_FEATURES,
    "corpus": {"id": VALUE, "image": {"_type": "Image"}, "taxon": VALUE},
    "queries": {
        "text": VALUE,
        "id": VALUE,
        "correct_taxon": VALUE,
        "candidate_taxa": {"feature": VALUE, "_type": "List"},
    },
}
BIOVITA_T2I_SCHEMAS = {
    **BIOVITA_SCHEMAS,
    "corpus": pa.schema([("id", pa.string()), ("image", IMAGE_STRUCT), ("taxon", pa.string())]),
    "queries": pa.schema(
        [
            ("text", pa.string()),
            ("id", pa.string()),
            ("correct_taxon", pa.string()),
            ("candidate_taxa", pa.list_(pa.string())),
        ]
    ),
}


def write_biovita_t2i_repo(root: Path, n_queries: int = 12, seed: int = 0) -> dict[str, Any]:
    """The MTEB BioVITAT2IRetrieval repo: `{subset}-{part}/test-*.parquet` for both subsets."""
    return _write_mteb_repo(
        root, biovita_t2i_subset, n_queries, seed, BIOVITA_T2I_SCHEMAS, BIOVITA_T2I_FEATURES
    )


# --- INQUIRE-Rerank -------------------------------------------------------------------------

# evendrow/INQUIRE-Rerank: the columns INQUIRE's and BioCAP's rerank code read (query, image,
# inat24_image_id, relevant; INQUIRE src/eval_rerank_with_clip.py @ 7e04857) and the rest of the
# column set public code reads from the hub (query_id, clip_score, inat24_file_name,
# supercategory, category, iconic_group, inat24_species_id, inat24_species_name, latitude,
# longitude, location_uncertainty, date); the card's column list at the pinned revision was not
# found. Supercategories are capitalised as in INQUIRE's inquire_queries_test.csv.
INQUIRE_SCHEMA = pa.schema(
    [
        ("image", IMAGE_STRUCT),
        ("query", pa.string()),
        ("query_id", pa.int64()),
        ("relevant", pa.int64()),
        ("clip_score", pa.float64()),
        ("inat24_image_id", pa.int64()),
        ("inat24_file_name", pa.string()),
        ("supercategory", pa.string()),
        ("category", pa.string()),
        ("iconic_group", pa.string()),
        ("inat24_species_id", pa.int64()),
        ("inat24_species_name", pa.string()),
        ("latitude", pa.float64()),
        ("longitude", pa.float64()),
        ("location_uncertainty", pa.float64()),
        ("date", pa.string()),
    ]
)
SUPERCATEGORIES = ["Appearance", "Behavior", "Context", "Species"]


def inquire_rows(split: str, n_queries: int, per_query: int, seed: int) -> list[dict[str, Any]]:
    """One row per (query, candidate); candidate images overlap between queries."""
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_queries):
        query = f"{split} query {q}: a bird doing thing {q}"
        pool = rng.choice(per_query * 2, size=per_query, replace=False)
        for rank, image_number in enumerate(pool):
            image_id = 1_000_000 + int(image_number)
            rows.append(
                {
                    "image": {"bytes": image_bytes(image_id), "path": f"{image_id}.jpg"},
                    "query": query,
                    "query_id": q + 1,
                    "relevant": int(rank % 3 == 0),
                    "clip_score": float(rng.random()),
                    "inat24_image_id": image_id,
                    "inat24_file_name": f"train/{image_id}.jpg",
                    "supercategory": SUPERCATEGORIES[q % len(SUPERCATEGORIES)],
                    "category": "cat",
                    "iconic_group": "Birds",
                    "inat24_species_id": q,
                    "inat24_species_name": "Corvus corax",
                    "latitude": 1.0,
                    "longitude": 2.0,
                    "location_uncertainty": 3.0,
                    "date": "2020-01-01",
                }
            )
    return rows


def write_inquire_repo(root: Path, n_queries: int = 6, per_query: int = 8) -> dict[str, list]:
    """`data/{test,validation}-*.parquet` with INQUIRE-Rerank's column set (see above)."""
    features = {name: VALUE for name in INQUIRE_SCHEMA.names}
    features["image"] = {"_type": "Image"}
    rows = {}
    for number, split in enumerate(("test", "validation")):
        rows[split] = inquire_rows(split, n_queries, per_query, number)
        table = pa.Table.from_pylist(rows[split], schema=INQUIRE_SCHEMA)
        write_parquet(root / "data" / f"{split}-00000-of-00001.parquet", table, features)
    (root / "README.md").write_text(
        card([("default", [("test", "data/test-*"), ("validation", "data/validation-*")])]),
        encoding="utf-8",
    )
    return rows


# --- Zero-shot classification: Rare Species, IDLE-OO Camera Traps, NABirds / Meta-Album -------

SPECIES = [
    (
        "Animalia",
        "Chordata",
        "Aves",
        "Accipitriformes",
        "Accipitridae",
        "Haliaeetus",
        "leucocephalus",
        "Bald Eagle",
    ),
    ("Animalia", "Chordata", "Mammalia", "Carnivora", "Felidae", "Panthera", "leo", "Lion"),
    ("Animalia", "Chordata", "Amphibia", "Anura", "Ranidae", "Rana", "temporaria", ""),
    (
        "Plantae",
        "Tracheophyta",
        "Magnoliopsida",
        "Rosales",
        "Rosaceae",
        "Rosa",
        "canina",
        "Dog Rose",
    ),
]


def _write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


# imageomics/rare-species at the pinned revision 06e9eae: an image-folder repository whose
# `metadata.csv` (root) holds `file_name` plus the catalogue columns; `datasets` loads it with
# columns rarespecies_id, eol_content_id, eol_page_id, kingdom, phylum, class, order, family,
# genus, species, sciName, common (a loader pinned to `revision="06e9eae"`; the card's Data
# Fields at that revision were not found). Images: dataset/<Kingdom-Phylum-Class-Order-Family-
# Genus-species>/<eol_content_id>_<eol_page_id>_eol_full-size-copy.jpg (the card: "JPGs with
# filenames `<eol_content_id>_<eol_page_id>_eol_full-size-copy.jpg`"). Ranks capitalised,
# `species` the epithet, `common` may be empty. Not every species has as many images as the
# others (the reference CSV's smallest: 21, 27, 27, 29, 29 of 30): `sizes` sets a class's count.
RARE_SPECIES_COLUMNS = [
    "file_name",
    "rarespecies_id",
    "eol_content_id",
    "eol_page_id",
    "kingdom",
    "phylum",
    "class",
    "order",
    "family",
    "genus",
    "species",
    "sciName",
    "common",
]


def write_rare_species_repo(
    root: Path,
    per_class: int = 3,
    corrupt: tuple[int, ...] = (),
    species: Sequence[tuple[str, ...]] | None = None,
    seed: int = 0,
    sizes: Mapping[int, int] | None = None,
) -> list[list[Any]]:
    """imageomics/rare-species as above (`sizes`: class number -> its image count, where not
    `per_class`); returns the CSV rows (file_name first)."""
    rows = []
    for c, taxon in enumerate(SPECIES if species is None else species):
        folder = "-".join(taxon[:7])
        for i in range((sizes or {}).get(c, per_class)):
            number = c * per_class + i
            content, page = 10_000_000 + 1000 * seed + number, 40_000 + c
            relative = f"dataset/{folder}/{content}_{page}_eol_full-size-copy.jpg"
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            data = BROKEN if number in corrupt else image_bytes(seed * 1000 + number)
            (root / relative).write_bytes(data)
            sci_name = f"{taxon[5]} {taxon[6]}"
            rows.append(
                [relative, f"{seed:02d}{c:04d}", content, page, *taxon[:7], sci_name, taxon[7]]
            )
    _write_csv(root / "metadata.csv", RARE_SPECIES_COLUMNS, rows)
    (root / "README.md").write_text(
        "---\nlicense: cc0-1.0\ntask_categories:\n- image-classification\n---\n# Rare Species\n",
        encoding="utf-8",
    )
    return rows


# BioCAP's and BioCLIP 2's own Rare Species annotation file (Imageomics/biocap @ 6e589bef,
# data/classification_annotation/rare_species/metadata.csv; the same bytes in Imageomics/
# bioclip-2 @ 49e1cf50, data/annotation/rare_species/metadata.csv): an unnamed index column,
# then kingdom, phylum, cls, order, family, genus, species, common_name, filepath, class;
# `filepath` "2024-03-20/<eol_content_id>_<eol_page_id>_eol-full-size-copy.jpg" (a hyphen where
# the hub's file names have an underscore), `class` "Genus species"; rows in an order of its
# own (grouped by species, not in the hub's order), no newline after the last row.
RARE_SPECIES_REFERENCE_COLUMNS = [
    "", "kingdom", "phylum", "cls", "order", "family", "genus", "species", "common_name",
    "filepath", "class",
]  # fmt: skip


def rare_species_reference(hub_rows: Sequence[Sequence[Any]]) -> bytes:
    """The reference CSV of the rows `write_rare_species_repo` returned: species in reverse
    order, each species' images in reverse order (so neither order is the hub's)."""
    by_species: dict[str, list[Sequence[Any]]] = {}
    for row in hub_rows:
        by_species.setdefault(row[11], []).append(row)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(RARE_SPECIES_REFERENCE_COLUMNS)
    number = 0
    for rows in reversed(list(by_species.values())):
        for row in reversed(rows):
            _, _, content, page, *ranks = row[:11]
            path = f"2024-03-20/{content}_{page}_eol-full-size-copy.jpg"
            writer.writerow([number, *ranks, row[12], path, f"{ranks[5]} {ranks[6]}"])
            number += 1
    return buffer.getvalue().rstrip("\n").encode("utf-8")


IDLE_SUBSETS = ("desert-lion", "ENA24", "island", "ohio-small-animals", "orinoquia")
# imageomics/IDLE-OO-Camera-Traps: `<subset>-balanced.csv` at the root with the columns of the
# copies BioCAP ships (Imageomics/biocap @ 6e589be,
# data/classification_annotation/camera_trap/*-balanced.csv; ohio-small-animals ends with
# filepath, filename, md5 instead of filepath, uuid, hashsum_original, hashsum_resized); images
# under data/test/<subset>/ (card, main), `filepath` = "<subset>/<file>" relative to data/test/.
# Every rank and common name is lower case; some rows are coarse (no genus or species), and two
# common names can share a taxon (island: rooster, domestic chicken), which BioCAP keeps as two
# classes.
IDLE_COLUMNS = [
    "url_gcp",
    "url_aws",
    "url_azure",
    "image_id",
    "sequence_id",
    "location_id",
    "frame_num",
    "original_label",
    "scientific_name",
    "common_name",
    "kingdom",
    "phylum",
    "cls",
    "order",
    "family",
    "genus",
    "species",
    "filepath",
]
IDLE_TAIL = {"ohio-small-animals": ["filename", "md5"]}
IDLE_DEFAULT_TAIL = ["uuid", "hashsum_original", "hashsum_resized"]
IDLE_TAXA = [
    ("animalia", "chordata", "mammalia", "carnivora", "felidae", "acinonyx", "jubatus", "cheetah"),
    ("animalia", "chordata", "aves", "galliformes", "phasianidae", "gallus", "gallus", "rooster"),
    (
        "animalia",
        "chordata",
        "aves",
        "galliformes",
        "phasianidae",
        "gallus",
        "gallus",
        "domestic chicken",
    ),
    ("animalia", "chordata", "aves", "procellariiformes", "procellariidae", "", "", "petrel"),
]
# The real island subset's smallest classes under taxon_com (BioCAP's island-balanced.csv @
# 6e589bef: 29 classes of 10 images, 2 of 9, and 'domestic chicken' and 'petrel chick' of one
# image each, the chick a coarse row like the petrel's): `island_shape` gives the island
# miniature those two one-image classes.
IDLE_PETREL_CHICK = (
    "animalia", "chordata", "aves", "procellariiformes", "procellariidae", "", "", "petrel chick",
)  # fmt: skip
IDLE_ISLAND_SINGLES = ("domestic chicken", "petrel chick")


def write_idle_oo_repo(
    root: Path, per_class: int = 2, island_shape: bool = False
) -> dict[str, list]:
    """imageomics/IDLE-OO-Camera-Traps as above (with `island_shape`, island's two one-image
    classes); returns each subset's rows (filepath first)."""
    rows: dict[str, list] = {}
    for number, subset in enumerate(IDLE_SUBSETS):
        rows[subset], lines = [], []
        tail = IDLE_TAIL.get(subset, IDLE_DEFAULT_TAIL)
        real_island = island_shape and subset == "island"
        taxa = [*IDLE_TAXA, IDLE_PETREL_CHICK] if real_island else IDLE_TAXA
        for c, taxon in enumerate(taxa):
            single = real_island and taxon[7] in IDLE_ISLAND_SINGLES
            for i in range(1 if single else per_class):
                serial = number * 100 + c * per_class + i
                if subset == "ohio-small-animals":
                    name = f"OH_sm_animals_CAM{c}_2020-07-12_06-50-{serial:02d}.JPG"
                    data = image_bytes(7000 + serial, "JPEG")
                else:
                    name = f"{serial:08x}-af04-4b81-9ad7-3ba6c164fe7b.png"
                    data = image_bytes(7000 + serial, "PNG")
                relative = f"{subset}/{name}"
                (root / "data" / "test" / relative).parent.mkdir(parents=True, exist_ok=True)
                (root / "data" / "test" / relative).write_bytes(data)
                md5 = hashlib.md5(data).hexdigest()
                scientific = " ".join(part for part in taxon[5:7] if part)
                extra = [name, md5] if subset == "ohio-small-animals" else [name, md5, md5]
                lines.append(
                    [f"https://example.org/{subset}/{serial}.jpg", "", "", f"{subset} : {serial}",
                     f"{subset} : unknown", subset, -1, taxon[7], scientific, taxon[7],
                     *taxon[:7], relative, *extra]
                )  # fmt: skip
                rows[subset].append([relative, *taxon])
        _write_csv(root / f"{subset}-balanced.csv", IDLE_COLUMNS + tail, lines)
    (root / "README.md").write_text("---\nlicense: other\n---\n# IDLE-OO\n", encoding="utf-8")
    return rows


def write_class_folder(root: Path, classes: list[str], per_class: int = 3) -> list[list[str]]:
    """NABirds / Meta-Album as BioCAP reads them: `metadata.csv` with `filepath,class`."""
    rows = []
    for c, label in enumerate(classes):
        for i in range(per_class):
            relative = f"images/{c:03d}/{i:04d}.jpg"
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_bytes(image_bytes(500 + c * per_class + i))
            rows.append([relative, label])
    _write_csv(root / "metadata.csv", ["filepath", "class"], rows)
    return rows


# --- Cornell Bird / PlantID -----------------------------------------------------------------


def write_annotation_pairs(
    root: Path, n: int = 10, duplicate_captions: int = 2, bad_md5: tuple[int, ...] = ()
) -> list[list[str]]:
    """Annotation CSV (id, source_url, captions, md5) + the user's folder `images/<id>.jpg`."""
    rows = []
    for i in range(n):
        item_id = f"{7000 + i}"
        data = image_bytes(900 + i)
        (root / "images").mkdir(parents=True, exist_ok=True)
        (root / "images" / f"{item_id}.jpg").write_bytes(data)
        md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
        if i in bad_md5:
            md5 = "0" * 32
        caption = f"a small bird number {i % (n - duplicate_captions)} on a branch"
        rows.append([item_id, f"https://example.invalid/{item_id}.jpg", caption, md5])
    _write_csv(root / "annotations.csv", ["id", "source_url", "captions", "md5"], rows)
    return rows


# --- Flickr30k / COCO -----------------------------------------------------------------------


def caption_sets(n_images: int, per_image: int = 5) -> list[list[str]]:
    """`per_image` distinct captions per image (one image gets a duplicate, as COCO has)."""
    sets = [[f"image {i} caption {j} of a dog" for j in range(per_image)] for i in range(n_images)]
    sets[-1][-1] = sets[0][0]
    return sets


def write_nlphuji_repo(
    root: Path,
    n_images: int = 8,
    csv_name: str = "test_1k_flickr.csv",
    zip_name: str = "images_flickr_1k_test.zip",
) -> list[list[str]]:
    """The nlphuji repo's raw files: the CSV (filename, raw JSON caption list, ...) + image zip.

    The loading script is present (as in the repo) but never run.
    """
    captions = caption_sets(n_images)
    rows = []
    root.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(root / zip_name, "w") as archive:
        for i in range(n_images):
            filename = f"{1000000 + i}.jpg"
            archive.writestr(f"{Path(zip_name).stem}/{filename}", image_bytes(300 + i))
            rows.append(
                [
                    json.dumps(captions[i]),
                    json.dumps(list(range(5 * i, 5 * i + 5))),
                    "test",
                    filename,
                    i,
                ]
            )
    _write_csv(root / csv_name, ["raw", "sentids", "split", "filename", "img_id"], rows)
    (root / f"{root.name}.py").write_text("# dataset loading script (not run)\n", encoding="utf-8")
    return captions


def write_wds_repo(root: Path, n_images: int = 8, per_shard: int = 3, split: str = "test") -> list:
    """clip_benchmark's webdataset repo: `<split>/<n>.tar` shards of (webp|jpg, txt) samples."""
    captions = caption_sets(n_images)
    folder = root / split
    folder.mkdir(parents=True, exist_ok=True)
    shards = 0
    for start in range(0, n_images, per_shard):
        with tarfile.open(folder / f"{shards}.tar", "w") as tar:
            for i in range(start, min(start + per_shard, n_images)):
                key = f"s{i:07d}"
                fmt, suffix = ("WEBP", "webp") if i % 2 else ("JPEG", "jpg")
                for name, data in (
                    (f"{key}.{suffix}", image_bytes(600 + i, fmt)),
                    (f"{key}.txt", "\n".join(captions[i]).encode()),
                ):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        shards += 1
    (folder / "nshards.txt").write_text(str(shards), encoding="utf-8")
    (root / "dataset_type.txt").write_text("retrieval", encoding="utf-8")
    return captions


def write_karpathy(
    root: Path,
    per_split: dict[str, int] | None = None,
    coco: bool = False,
    images_dir: str = "images",
) -> dict:
    """Karpathy split JSON + image folder (COCO entries carry a `filepath` subfolder)."""
    per_split = per_split or {"train": 6, "val": 3, "test": 5}
    images, sentid, imgid = [], 0, 0
    for split, count in per_split.items():
        for i in range(count):
            filename = f"COCO_{split}_{i:06d}.jpg" if coco else f"{split}{i:04d}.jpg"
            subfolder = ("val2014" if split != "train" else "train2014") if coco else ""
            (root / images_dir / subfolder).mkdir(parents=True, exist_ok=True)
            (root / images_dir / subfolder / filename).write_bytes(image_bytes(700 + imgid))
            sentences = [
                {
                    "tokens": ["a", "cat"],
                    "raw": f"{split} {i} caption {j}",
                    "imgid": imgid,
                    "sentid": sentid + j,
                }
                for j in range(5)
            ]
            entry = {
                "filename": filename,
                "imgid": imgid,
                "split": split,
                "sentences": sentences,
                "sentids": [s["sentid"] for s in sentences],
            }
            if coco:
                entry.update(filepath=subfolder, cocoid=imgid)
            images.append(entry)
            sentid += 5
            imgid += 1
    document = {"images": images, "dataset": "coco" if coco else "flickr30k"}
    name = "dataset_coco.json" if coco else "dataset_flickr30k.json"
    (root / name).write_text(json.dumps(document), encoding="utf-8")
    return document


def prepare_paired_files(files: list[Path], out_dir: Path, provenance: dict[str, Any]) -> int:
    """BioMedFlickr-layout parquet files -> canonical layout, through the loader and writer the
    prepare job uses; returns the number of pairs."""
    meta = write_canonical(
        read_paired_files(files), "paired", out_dir, provenance, where=str(files[0])
    )
    return int(meta["n_images"])
