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
    IDLE_SUBSETS,
    SPECIES,
    write_annotation_pairs,
    write_biovita_repo,
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


def expected_taxon_com(taxon: tuple[str, ...]) -> str:
    """BioCAP's taxon_com text, written out from the fixture's columns."""
    text = " ".join(taxon[:7])
    return f"{text} with common name {taxon[7]}" if taxon[7] else text


def test_rare_species_taxon_com_with_the_80_openai_templates(tmp_path: Path) -> None:
    write_rare_species_repo(tmp_path / "repo", per_class=2)
    source = {
        "path": str(tmp_path / "repo"),
        "annotations": "metadata.csv",
        "columns": {"file": "file_name"},
        "expected": {"images": 8},
    }
    meta, tables = prepare(tmp_path, "zeroshot", source, text_type="taxon_com")
    assert len(zero_shot.OPENAI_IMAGENET_TEMPLATES) == 80
    assert meta["n_templates"] == 80 and meta["n_classes"] == 4
    assert len(tables["texts"]) == 4 * 80
    by_class: dict[str, list[str]] = {}
    for text in tables["texts"]:
        by_class.setdefault(text["group"], []).append(text["text"])
    wanted = {expected_taxon_com(taxon) for taxon in SPECIES}
    assert {texts[0] for texts in by_class.values()} == {f"a bad photo of a {w}." for w in wanted}
    assert "Animalia Chordata Amphibia Anura Ranidae Rana temporaria" in {
        texts[0][len("a bad photo of a ") : -1] for texts in by_class.values()
    }
    assert tables["qrels"] == [] and tables["candidates"] == []
    for image in tables["images"]:
        assert image["group"] in by_class
        taxon = next(t for t in SPECIES if f"{t[5]}_{t[6]}" in image["image_id"])
        assert image["group"] == " ".join(taxon[:7])


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
source = {"path": str(root / "repo"), "columns": {"file": "file_name"}}
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
    source = {"path": str(tmp_path / "repo"), "columns": {"file": "file_name"}}
    _, tables = prepare(tmp_path, "zeroshot", source, text_type=text_type, templates="none")
    assert expected in {t["text"] for t in tables["texts"]}


def test_common_names_missing_for_a_class_is_an_empty_text(tmp_path: Path) -> None:
    write_rare_species_repo(tmp_path / "repo", per_class=1)
    source = {"path": str(tmp_path / "repo"), "columns": {"file": "file_name"}}
    with pytest.raises(VlbenchError, match="text 'c00000-t00' is empty after processing"):
        prepare(tmp_path, "zeroshot", source, text_type="com", templates="none")


def test_idle_oo_one_subset_and_the_combination(tmp_path: Path) -> None:
    rows = write_idle_oo_repo(tmp_path / "repo", per_class=2)
    base = {"path": str(tmp_path / "repo"), "columns": {"file": "file_name"}}
    one = {**base, "annotations": "ENA24-balanced.csv", "subset": "ENA24"}
    meta, tables = prepare(tmp_path / "one", "zeroshot", one, text_type="taxon_com")
    assert {i["image_id"] for i in tables["images"]} == {r[0] for r in rows["ENA24"]}
    assert meta["subset"] == "ENA24"
    every = {
        **base,
        "annotations": [f"{s}-balanced.csv" for s in IDLE_SUBSETS],
        "subset": "all",
    }
    meta, tables = prepare(tmp_path / "all", "zeroshot", every, text_type="taxon_com")
    assert len(tables["images"]) == sum(len(r) for r in rows.values())
    assert len({i["image_id"] for i in tables["images"]}) == len(tables["images"])


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
    source = {"path": str(tmp_path / "repo"), "columns": {"file": "file_name"}}
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
