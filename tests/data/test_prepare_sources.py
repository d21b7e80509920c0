"""Every source layout, built in miniature, lands in the canonical layout exactly."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import open_clip.zero_shot_metadata as zero_shot
import pyarrow.parquet as pq
import pytest
from fixtures_sources import (
    BROKEN,
    SPECIES,
    write_annotation_pairs,
    write_biovita_repo,
    write_biovita_t2i_repo,
    write_class_folder,
    write_idle_oo_repo,
    write_inquire_repo,
    write_karpathy,
    write_nlphuji_repo,
    write_rare_species_repo,
    write_wds_repo,
)

from vlbench.data.prepare import prepare_benchmark
from vlbench.data.sources import classification
from vlbench.data.synthetic import write_synthetic_biomedflickr
from vlbench.errors import VlbenchError


def prepare(
    tmp_path: Path, protocol: str, source: dict[str, Any], **settings: Any
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Prepare a local source; return benchmark.json and the canonical tables as rows."""
    out = tmp_path / "out"
    meta = prepare_benchmark("b", protocol, source, None, out, settings)
    tables = {
        name: pq.read_table(out / f"{name}.parquet").to_pylist()
        for name in ("images", "texts", "qrels", "candidates")
    }
    assert json.loads((out / "benchmark.json").read_text()) == meta
    return meta, tables


def test_biomedflickr_local_repo_pairs_row_i_with_row_i(tmp_path: Path) -> None:
    repo = tmp_path / "BioMedFlickr"
    write_synthetic_biomedflickr(repo, pairs=12, seed=1)
    raw = pq.read_table(next((repo / "data").glob("test-*.parquet"))).to_pylist()
    source = {"path": str(repo), "split": "test", "expected": {"images": 12}}
    meta, tables = prepare(tmp_path, "paired", source)
    assert [r["text"] for r in tables["texts"]] == [r["caption"] for r in raw]
    assert [r["image"] for r in tables["images"]] == [r["image"]["bytes"] for r in raw]
    assert {(q["image_id"], q["text_id"]) for q in tables["qrels"]} == {
        (str(i), str(i)) for i in range(12)
    }
    assert tables["candidates"] == []
    assert meta["split"] == meta["subset"] == "test" and meta["format"] == "hf_parquet"


def test_biomedflickr_row_count_is_checked_against_the_pinned_count(tmp_path: Path) -> None:
    repo = tmp_path / "BioMedFlickr"
    write_synthetic_biomedflickr(repo, pairs=5, seed=1)
    with pytest.raises(VlbenchError, match=r"expected 7185 images .* found 5"):
        prepare(tmp_path, "paired", {"path": str(repo), "expected": {"images": 7185}})
    assert not (tmp_path / "out" / "images.parquet").exists()


@pytest.mark.parametrize("subset", ["unseen_species", "unseen_genus"])
def test_biovita_subsets(tmp_path: Path, subset: str) -> None:
    rows = write_biovita_repo(tmp_path / "repo", n_queries=9)[subset]
    source = {"path": str(tmp_path / "repo"), "subset": subset, "expected": {"texts": 12}}
    meta, tables = prepare(tmp_path, "taxon_candidates", source)
    assert [(t["text_id"], t["text"], t["group"]) for t in tables["texts"]] == [
        (r["id"], r["taxon"], r["taxon"]) for r in rows["corpus"]
    ]
    assert [(i["image_id"], i["group"]) for i in tables["images"]] == [
        (q["id"], q["correct_taxon"]) for q in rows["queries"]
    ]
    assert [i["image"] for i in tables["images"]] == [q["image"]["bytes"] for q in rows["queries"]]
    expected_candidates = {
        (r["query-id"], tuple(r["corpus-ids"]), tuple(q["candidate_taxa"]))
        for r, q in zip(rows["top_ranked"], rows["queries"], strict=True)
    }
    assert {
        (c["query_id"], tuple(c["candidate_ids"]), tuple(c["candidate_groups"]))
        for c in tables["candidates"]
    } == expected_candidates
    assert {c["query_modality"] for c in tables["candidates"]} == {"image"}
    assert len(tables["qrels"]) == len(rows["qrels"])
    assert meta["subset"] == subset and meta["split"] == "test"
    assert meta["n_queries_whose_correct_taxon_is_not_a_candidate"] == 0
    if subset == "unseen_genus":
        assert len({t["text"] for t in tables["texts"]}) < len(tables["texts"])


@pytest.mark.parametrize("subset", ["unseen_species", "unseen_genus"])
def test_biovita_text_to_image_subsets(tmp_path: Path, subset: str) -> None:
    """BioVITAT2IRetrieval: taxon-name queries with candidate taxa over the image corpus."""
    rows = write_biovita_t2i_repo(tmp_path / "repo", n_queries=9)[subset]
    source = {"path": str(tmp_path / "repo"), "subset": subset, "format": "biovita_t2i"}
    meta, tables = prepare(tmp_path, "taxon_candidates", source)
    assert [(t["text_id"], t["text"], t["group"]) for t in tables["texts"]] == [
        (q["id"], q["text"], q["correct_taxon"]) for q in rows["queries"]
    ]
    assert [(i["image_id"], i["group"]) for i in tables["images"]] == [
        (r["id"], r["taxon"]) for r in rows["corpus"]
    ]
    assert {
        (
            c["query_modality"],
            c["query_id"],
            tuple(c["candidate_ids"]),
            tuple(c["candidate_groups"]),
        )
        for c in tables["candidates"]
    } == {
        ("text", r["query-id"], tuple(r["corpus-ids"]), tuple(q["candidate_taxa"]))
        for r, q in zip(rows["top_ranked"], rows["queries"], strict=True)
    }
    # Judgements are stored as (image, text): the corpus image is the relevant item.
    assert {(j["image_id"], j["text_id"]) for j in tables["qrels"]} == {
        (r["corpus-id"], r["query-id"]) for r in rows["qrels"]
    }
    assert meta["n_queries_whose_correct_taxon_is_not_a_candidate"] == 0
    assert meta["n_queries_with_candidates_outside_their_taxa"] == 0


def test_biovita_text_to_image_layout_read_as_image_to_text_names_the_columns(
    tmp_path: Path,
) -> None:
    write_biovita_t2i_repo(tmp_path / "repo", n_queries=3)
    source = {"path": str(tmp_path / "repo"), "subset": "unseen_species"}
    with pytest.raises(
        VlbenchError, match=r"missing column\(s\) text for BioVITA .*has: id, image"
    ):
        prepare(tmp_path, "taxon_candidates", source)


def test_inquire_rerank(tmp_path: Path) -> None:
    rows = write_inquire_repo(tmp_path / "repo", n_queries=5, per_query=8)["validation"]
    source = {
        "path": str(tmp_path / "repo"),
        "split": "validation",
        "expected": {"candidates_per_query": 8},
    }
    meta, tables = prepare(tmp_path, "rerank", source)
    queries = list(dict.fromkeys(r["query"] for r in rows))
    assert [t["text"] for t in tables["texts"]] == queries
    text_id = {t["text"]: t["text_id"] for t in tables["texts"]}
    assert {t["group"] for t in tables["texts"]} <= {"Appearance", "Behavior", "Context", "Species"}
    assert {i["image_id"] for i in tables["images"]} == {str(r["inat24_image_id"]) for r in rows}
    assert len(tables["images"]) == len({r["inat24_image_id"] for r in rows}) < len(rows)
    judged = {(q["image_id"], q["text_id"]): q["relevance"] for q in tables["qrels"]}
    assert judged == {(str(r["inat24_image_id"]), text_id[r["query"]]): r["relevant"] for r in rows}
    for candidates in tables["candidates"]:
        assert candidates["query_modality"] == "text"
        query = next(t["text"] for t in tables["texts"] if t["text_id"] == candidates["query_id"])
        assert candidates["candidate_ids"] == [
            str(r["inat24_image_id"]) for r in rows if r["query"] == query
        ]
    assert meta["split"] == "validation"


def test_inquire_candidate_count_is_checked(tmp_path: Path) -> None:
    write_inquire_repo(tmp_path / "repo", n_queries=2, per_query=8)
    source = {"path": str(tmp_path / "repo"), "expected": {"candidates_per_query": 100}}
    with pytest.raises(VlbenchError, match="has 8 candidates, expected 100"):
        prepare(tmp_path, "rerank", source)


# The shipped config's reading of the hub's Rare Species columns (config/biocap.yaml).
RARE_COLUMNS = {"file": "file_name", "common": "common"}


def expected_taxon_com(taxon: tuple[str, ...]) -> str:
    """BioCAP's taxon_com text (naming_eval.Taxon), written out from the fixture's columns."""
    ranks = [rank.capitalize() for rank in taxon[:6]] + [taxon[6].lower()]
    text = " ".join(ranks) if ranks[0] else f"{ranks[5]} {ranks[6]}"
    return f"{text} with common name {taxon[7]}" if taxon[7] else text


def test_rare_species_taxon_com_with_the_80_openai_templates(tmp_path: Path) -> None:
    write_rare_species_repo(tmp_path / "repo", per_class=2)
    source = {
        "path": str(tmp_path / "repo"),
        "annotations": "metadata.csv",
        "columns": RARE_COLUMNS,
        "expected": {"images": 8},
    }
    meta, tables = prepare(tmp_path, "zeroshot", source, text_type="taxon_com")
    assert len(zero_shot.OPENAI_IMAGENET_TEMPLATES) == 80
    assert meta["n_templates"] == 80 and meta["n_classes"] == 4
    assert len(tables["texts"]) == 4 * 80
    by_class: dict[str, list[str]] = {}
    for text in tables["texts"]:
        by_class.setdefault(text["group"], []).append(text["text"])
    wanted = [expected_taxon_com(taxon) for taxon in SPECIES]
    # Classes are numbered in order of first appearance, as the reference numbers them.
    assert list(by_class) == wanted
    assert [texts[0] for texts in by_class.values()] == [f"a bad photo of a {w}." for w in wanted]
    assert "Animalia Chordata Amphibia Anura Ranidae Rana temporaria" in wanted
    assert tables["qrels"] == [] and tables["candidates"] == []
    for image in tables["images"]:
        taxon = next(t for t in SPECIES if "-".join(t[:7]) in image["image_id"])
        assert image["group"] == expected_taxon_com(taxon)


def test_the_stored_templates_are_open_clips_openai_imagenet_templates() -> None:
    stored = classification.templates("openai_imagenet")
    for text in ("Rana temporaria", "a {} brace", "Bald Eagle"):
        assert [template(text) for template in stored] == [
            template(text) for template in zero_shot.OPENAI_IMAGENET_TEMPLATES
        ]


# Prepares the Rare Species fixture with the 80 templates, then lists the model libraries it
# imported (none: the templates are data).
PREPARE_IMPORTS = """
import sys
from pathlib import Path
from vlbench.data.prepare import prepare_benchmark
root = Path(sys.argv[1])
source = {"path": str(root / "repo"), "columns": {"file": "file_name", "common": "common"}}
prepare_benchmark("b", "zeroshot", source, None, root / "out", {"text_type": "taxon_com"})
print(sorted(name for name in ("open_clip", "torch", "transformers") if name in sys.modules))
"""


def test_preparing_a_zero_shot_benchmark_imports_no_model_library(tmp_path: Path) -> None:
    write_rare_species_repo(tmp_path / "repo", per_class=1)
    result = subprocess.run(
        [sys.executable, "-c", PREPARE_IMPORTS, str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[-2] == "[]"
    assert json.loads((tmp_path / "out" / "benchmark.json").read_text())["n_templates"] == 80


@pytest.mark.parametrize(
    ("text_type", "expected"),
    [
        ("sci", "Haliaeetus leucocephalus"),
        ("taxon", "Animalia Chordata Aves Accipitriformes Accipitridae Haliaeetus leucocephalus"),
        ("sci_com", "Haliaeetus leucocephalus with common name Bald Eagle"),
    ],
)
def test_text_types(tmp_path: Path, text_type: str, expected: str) -> None:
    write_rare_species_repo(tmp_path / "repo", per_class=1)
    source = {"path": str(tmp_path / "repo"), "columns": RARE_COLUMNS}
    _, tables = prepare(tmp_path, "zeroshot", source, text_type=text_type, templates="none")
    assert expected in {t["text"] for t in tables["texts"]}


def test_a_class_without_a_common_name_under_com_names_its_line(tmp_path: Path) -> None:
    write_rare_species_repo(tmp_path / "repo", per_class=1)
    source = {"path": str(tmp_path / "repo"), "columns": RARE_COLUMNS}
    with pytest.raises(VlbenchError, match=r"metadata.csv: line 4: empty file path or class"):
        prepare(tmp_path, "zeroshot", source, text_type="com", templates="none")


@pytest.mark.parametrize(
    ("text_type", "dropped"), [("taxon_com", "common"), ("sci", "genus"), ("taxon", "class")]
)
def test_a_column_the_text_type_needs_is_an_error_not_another_text(
    tmp_path: Path, text_type: str, dropped: str
) -> None:
    """A CSV without a column the text type reads never falls back to another text type."""
    write_rare_species_repo(tmp_path / "repo", per_class=1)
    csv_path = tmp_path / "repo" / "metadata.csv"
    lines = csv_path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split(",")
    position = header.index(dropped)
    kept = [",".join(v for i, v in enumerate(line.split(",")) if i != position) for line in lines]
    csv_path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    source = {"path": str(tmp_path / "repo"), "columns": RARE_COLUMNS}
    with pytest.raises(VlbenchError) as caught:
        prepare(tmp_path, "zeroshot", source, text_type=text_type)
    message = str(caught.value)
    assert "\n" not in message
    assert f"missing column(s) {dropped} for text_type {text_type!r}" in message
    assert str(csv_path) in message and "(has: file_name," in message
    assert not (tmp_path / "out" / "images.parquet").exists()


IDLE_SOURCE = {"columns": {"file": "filepath", "class": "cls"}, "images": "data/test"}


def test_idle_oo_subset_classes_are_biocaps_texts(tmp_path: Path) -> None:
    """Lower-case ranks are capitalised, a coarse row keeps its empty ranks, and two common
    names of one taxon are two classes, as BioCAP's evaluation builds them."""
    rows = write_idle_oo_repo(tmp_path / "repo", per_class=2)
    source = {
        "path": str(tmp_path / "repo"),
        **IDLE_SOURCE,
        "annotations": "island-balanced.csv",
        "subset": "island",
    }
    meta, tables = prepare(tmp_path, "zeroshot", source, text_type="taxon_com")
    assert [i["image_id"] for i in tables["images"]] == [r[0] for r in rows["island"]]
    assert meta["subset"] == "island" and meta["n_classes"] == 4
    groups = list(dict.fromkeys(t["group"] for t in tables["texts"]))
    assert groups == [
        "Animalia Chordata Mammalia Carnivora Felidae Acinonyx jubatus with common name cheetah",
        "Animalia Chordata Aves Galliformes Phasianidae Gallus gallus with common name rooster",
        "Animalia Chordata Aves Galliformes Phasianidae Gallus gallus with common name "
        "domestic chicken",
        "Animalia Chordata Aves Procellariiformes Procellariidae   with common name petrel",
    ]
    assert [i["group"] for i in tables["images"]] == [g for g in groups for _ in range(2)]


def test_idle_oo_ohio_subset_reads_its_own_column_tail(tmp_path: Path) -> None:
    rows = write_idle_oo_repo(tmp_path / "repo", per_class=1)
    source = {
        "path": str(tmp_path / "repo"),
        **IDLE_SOURCE,
        "annotations": "ohio-small-animals-balanced.csv",
    }
    _, tables = prepare(tmp_path, "zeroshot", source, text_type="taxon_com")
    assert [i["image_id"] for i in tables["images"]] == [r[0] for r in rows["ohio-small-animals"]]
    assert all(i["image_id"].endswith(".JPG") for i in tables["images"])


def test_nabirds_metaalbum_folder_asis(tmp_path: Path) -> None:
    labels = ["Black_footed_Albatross", "Laysan_Albatross", "Mallard (Breeding male)"]
    rows = write_class_folder(tmp_path / "nabirds", labels, per_class=2)
    source = {"path": str(tmp_path / "nabirds"), "expected": {"images": 6}}
    _, tables = prepare(tmp_path, "zeroshot", source, text_type="asis")
    assert "a photo of a Black_footed_Albatross." in {t["text"] for t in tables["texts"]}
    assert {(i["image_id"], i["group"]) for i in tables["images"]} == {(r[0], r[1]) for r in rows}


def test_cornell_bird_md5_verified_pairs_with_the_reference_prompt(tmp_path: Path) -> None:
    rows = write_annotation_pairs(tmp_path / "cornell", n=9)
    source = {
        "path": str(tmp_path / "cornell"),
        "format": "annotation_csv",
        "annotations": "annotations.csv",
        "images": "images",
    }
    meta, tables = prepare(tmp_path, "paired", source, prompt_prefix="a photo of")
    assert [t["text"] for t in tables["texts"]] == ["a photo of" + r[2] for r in rows]
    assert [t["text_id"] for t in tables["texts"]] == [r[0] for r in rows]
    for image, row in zip(tables["images"], rows, strict=True):
        assert hashlib.md5(image["image"], usedforsecurity=False).hexdigest() == row[3]
    assert {(q["image_id"], q["text_id"]) for q in tables["qrels"]} == {(r[0], r[0]) for r in rows}
    assert meta["md5_verified"] is True


def test_cornell_bird_md5_mismatch_fails_or_is_skipped(tmp_path: Path) -> None:
    rows = write_annotation_pairs(tmp_path / "cornell", n=6, bad_md5=(2,))
    source = {
        "path": str(tmp_path / "cornell"),
        "format": "annotation_csv",
        "annotations": "annotations.csv",
        "images": "images",
    }
    with pytest.raises(
        VlbenchError, match=rf"1 image\(s\) cannot be read or decoded, e.g. '{rows[2][0]}'"
    ):
        prepare(tmp_path, "paired", source)
    meta, tables = prepare(tmp_path, "paired", source, image_policy="skip")
    assert meta["n_skipped_images"] == 1 and meta["skipped_images"][0]["image_id"] == rows[2][0]
    assert "md5" in meta["skipped_images"][0]["reason"]
    assert rows[2][0] not in {t["text_id"] for t in tables["texts"]}
    assert len(tables["texts"]) == len(tables["images"]) == len(tables["qrels"]) == 5


def multi_positive_expectations(tables: dict[str, list], captions: list[list[str]]) -> None:
    """Five captions per image, each judged relevant to its own image only."""
    assert len(tables["images"]) == len(captions)
    assert [t["text"] for t in tables["texts"]] == [c for group in captions for c in group]
    owner = {q["text_id"]: q["image_id"] for q in tables["qrels"]}
    assert len(owner) == len(tables["texts"])
    image_ids = [i["image_id"] for i in tables["images"]]
    for number, text in enumerate(tables["texts"]):
        assert owner[text["text_id"]] == image_ids[number // 5]


def test_nlphuji_csv_and_zip(tmp_path: Path) -> None:
    captions = write_nlphuji_repo(tmp_path / "flickr_1k_test_image_text_retrieval", n_images=6)
    source = {
        "path": str(tmp_path / "flickr_1k_test_image_text_retrieval"),
        "format": "nlphuji_csv_zip",
        "annotations": "test_1k_flickr.csv",
        "archive": "images_flickr_1k_test.zip",
        "expected": {"images": 6, "texts": 30},
    }
    _, tables = prepare(tmp_path, "multi_positive", source)
    multi_positive_expectations(tables, captions)
    assert tables["images"][0]["image_id"] == "1000000.jpg"


def test_clip_benchmark_webdataset(tmp_path: Path) -> None:
    captions = write_wds_repo(tmp_path / "wds_flickr30k", n_images=7, per_shard=3)
    source = {"path": str(tmp_path / "wds_flickr30k"), "format": "clip_benchmark_wds"}
    meta, tables = prepare(tmp_path, "multi_positive", source)
    multi_positive_expectations(tables, captions)
    assert meta["shards"] == ["0.tar", "1.tar", "2.tar"]


@pytest.mark.parametrize("coco", [False, True])
def test_karpathy_test_and_full_pool(tmp_path: Path, coco: bool) -> None:
    document = write_karpathy(tmp_path / "karpathy", coco=coco)
    name = "dataset_coco.json" if coco else "dataset_flickr30k.json"
    base = {
        "path": str(tmp_path / "karpathy"),
        "format": "karpathy_json",
        "annotations": name,
        "images": "images",
    }
    _, test = prepare(tmp_path / "test", "multi_positive", {**base, "subset": "test"})
    test_entries = [e for e in document["images"] if e["split"] == "test"]
    multi_positive_expectations(test, [[s["raw"] for s in e["sentences"]] for e in test_entries])
    meta, full = prepare(tmp_path / "full", "multi_positive", {**base, "subset": "full"})
    assert len(full["images"]) == len(document["images"])
    assert len(full["texts"]) == 5 * len(document["images"])
    judged_images = {q["image_id"] for q in full["qrels"]}
    assert judged_images == {e["filename"] for e in test_entries}
    assert meta["subset"] == "full" and meta["karpathy_splits"] == ["test", "train", "val"]


def test_undecodable_images_fail_by_default_and_are_recorded_when_skipped(tmp_path: Path) -> None:
    write_rare_species_repo(tmp_path / "repo", per_class=2, corrupt=(1, 4))
    source = {"path": str(tmp_path / "repo"), "columns": RARE_COLUMNS}
    with pytest.raises(VlbenchError, match=r"2 image\(s\) cannot be read or decoded"):
        prepare(tmp_path, "zeroshot", source, text_type="sci")
    meta, tables = prepare(tmp_path, "zeroshot", source, text_type="sci", image_policy="skip")
    assert meta["n_skipped_images"] == 2 and meta["n_source_images"] == 8
    assert len(tables["images"]) == 6
    kept = {i["image"] for i in tables["images"]}
    assert BROKEN not in kept


def test_missing_image_file_is_reported_with_its_id(tmp_path: Path) -> None:
    rows = write_class_folder(tmp_path / "folder", ["a", "b"], per_class=2)
    (tmp_path / "folder" / rows[3][0]).unlink()
    with pytest.raises(VlbenchError, match=rf"'{rows[3][0]}' \(unreadable"):
        prepare(tmp_path, "zeroshot", {"path": str(tmp_path / "folder")}, text_type="asis")


def test_format_must_match_protocol(tmp_path: Path) -> None:
    with pytest.raises(VlbenchError, match="feeds protocol 'multi_positive', not 'paired'"):
        prepare(tmp_path, "paired", {"path": str(tmp_path), "format": "karpathy_json"})
