"""A reference evaluation's own annotation file defines the images, their order and classes.

BioCAP and BioCLIP 2 evaluate Rare Species from their own CSV (Imageomics/biocap @ 6e589bef,
data/classification_annotation/rare_species/metadata.csv), not from the hub's metadata. The
file is fetched through the loopback server's GitHub raw route (the real urllib client code),
checked against its sha256 and joined to the hub's image files by (eol_content_id,
eol_page_id); few-shot folds then follow the reference's order, as BioCLIP's few_shot.py run on
that CSV does.
"""

from __future__ import annotations

import csv
import hashlib
import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from fewshot_reference import reference_fold_accuracies
from fixtures_sources import (
    IDLE_SUBSETS,
    rare_species_reference,
    write_idle_oo_repo,
    write_rare_species_repo,
)
from loopback_hub import LoopbackHub

from vlbench.data.prepare import prepare_benchmark
from vlbench.data.sources import download
from vlbench.errors import VlbenchError
from vlbench.metrics.fewshot import fewshot_folds

CONFIG = Path(__file__).resolve().parents[2] / "config" / "biocap.yaml"
COMMIT = "6e589bef9503c8ff0f4f4580365cdd6367d50b38"
RARE_PATH = "data/classification_annotation/rare_species/metadata.csv"


def shipped_source(benchmark: str) -> dict:
    """A benchmark's source as config/biocap.yaml ships it, less the full set's counts."""
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    source = dict(config["benchmarks"][benchmark]["source"])
    source.pop("expected")
    return source


@pytest.fixture
def served(tmp_path: Path, loopback_hub: LoopbackHub, monkeypatch: pytest.MonkeyPatch):
    """The Rare Species miniature on the hub and its reference CSV on the raw route; returns
    (source as shipped with the miniature's sha256, reference rows)."""
    monkeypatch.setenv("VLBENCH_GITHUB_RAW_ENDPOINT", loopback_hub.endpoint + "/github-raw")
    monkeypatch.setenv("VLBENCH_REFERENCE_CACHE", str(tmp_path / "reference-cache"))
    monkeypatch.setattr(download, "FIRST_DELAY_S", 0.0)
    source = shipped_source("rare-species")
    hub_rows = write_rare_species_repo(tmp_path / "hub", per_class=7, sizes={1: 5, 3: 6})
    loopback_hub.commit_folder("dataset", source["repo"], tmp_path / "hub", sha=source["revision"])
    data = rare_species_reference(hub_rows)
    loopback_hub.publish_github("Imageomics/biocap", COMMIT, RARE_PATH, data)
    source["reference"] = {**source["reference"], "sha256": hashlib.sha256(data).hexdigest()}
    rows = list(csv.DictReader(data.decode("utf-8").splitlines()))
    return source, rows


def prepare(source: dict, out: Path) -> pl.DataFrame:
    prepare_benchmark("rare-species", "zeroshot", source, None, out, {"text_type": "taxon_com"})
    return pl.read_parquet(out / "images.parquet", columns=["image_id", "group"])


def test_images_follow_the_reference_rows_order_and_class_columns(served, tmp_path) -> None:
    source, rows = served
    images = prepare(source, tmp_path / "out")
    assert images["image_id"].to_list() == [row["filepath"] for row in rows]
    expected = [
        f"{r['kingdom']} {r['phylum']} {r['cls']} {r['order']} {r['family']} {r['genus']} "
        f"{r['species']}" + (f" with common name {r['common_name']}" if r["common_name"] else "")
        for r in rows
    ]
    assert images["group"].to_list() == expected
    meta = (tmp_path / "out" / "benchmark.json").read_text(encoding="utf-8")
    assert RARE_PATH in meta and COMMIT in meta


def test_fewshot_folds_equal_bioclips_few_shot_on_the_reference_csv_order(served, tmp_path):
    """Features keyed by image; our folds over the prepared order equal the restated
    few_shot.py over the CSV's rows, and differ from a run over the hub's order (the order
    matters, so the test can fail)."""
    source, rows = served
    images = prepare(source, tmp_path / "out")
    rng = np.random.default_rng(11)
    ids = [row["filepath"] for row in rows]
    feature = {item: rng.normal(size=16).astype(np.float32) for item in ids}
    for item in ids:
        feature[item] /= np.linalg.norm(feature[item])
    # few_shot.py's labels: the CSV's `class` column (its DatasetFromFile default, asis) as class
    # numbers in order of first appearance.
    number = {name: i for i, name in enumerate(dict.fromkeys(row["class"] for row in rows))}
    labels = [number[row["class"]] for row in rows]
    expected = reference_fold_accuracies(np.stack([feature[i] for i in ids]), labels, [1, 5], 5)
    ours = fewshot_folds(
        np.stack([feature[i] for i in images["image_id"]]), images["group"].to_list(), [1, 5], 5
    )
    assert {result.shots: list(result.fold_accuracies) for result in ours} == expected
    hub_order = sorted(range(len(ids)), key=lambda row: ids[row].split("/")[1])
    shuffled = reference_fold_accuracies(
        np.stack([feature[ids[i]] for i in hub_order]), [labels[i] for i in hub_order], [1, 5], 5
    )
    assert shuffled != expected


def test_a_reference_row_without_an_image_is_named(served, tmp_path) -> None:
    source, rows = served
    missing = rows[3]["filepath"]
    content_page = missing.split("/")[1].removesuffix("eol-full-size-copy.jpg")
    (image,) = (tmp_path / "hub").rglob(f"{content_page}eol_full-size-copy.jpg")
    image.unlink()
    source = {**source, "repo": source["repo"]}
    # A local copy of the hub layout reads the same way (no hub involved).
    source.pop("repo"), source.pop("revision")
    source["path"] = str(tmp_path / "hub")
    with pytest.raises(VlbenchError) as error:
        prepare(source, tmp_path / "out")
    message = str(error.value)
    assert f"1 row(s) of {tmp_path}" in message and f"line 5 ({missing!r})" in message
    assert "find no image under" in message and "\n" not in message


def test_a_download_whose_sha256_differs_stops_and_is_not_cached(served, tmp_path) -> None:
    source, _ = served
    source["reference"] = {**source["reference"], "sha256": "0" * 64}
    with pytest.raises(VlbenchError, match=r"\.reference\.sha256: .* has sha256 [0-9a-f]{64}, "):
        prepare(source, tmp_path / "out")
    assert not any(path.is_file() for path in (tmp_path / "reference-cache").rglob("*"))


def test_a_missing_file_is_one_line_and_a_cached_copy_is_checked_on_reuse(
    served, tmp_path, loopback_hub
) -> None:
    source, rows = served
    wrong = {**source, "reference": {**source["reference"], "path": "data/nothing.csv"}}
    with pytest.raises(VlbenchError, match=r"answered 404 .*is the repository, commit or path"):
        prepare(wrong, tmp_path / "out")
    prepare(source, tmp_path / "first")
    (cached,) = [p for p in (tmp_path / "reference-cache").rglob("*") if p.is_file()]
    cached.write_bytes(cached.read_bytes()[:-5])  # damaged in the cache: fetched again
    images = prepare(source, tmp_path / "second")
    assert images["image_id"].to_list() == [row["filepath"] for row in rows]
    assert len(loopback_hub.served("GET", RARE_PATH)) == 2


def test_camera_trap_reference_paths_name_the_hub_images_as_written(
    tmp_path, loopback_hub, monkeypatch
) -> None:
    """IDLE-OO island: BioCAP's island-balanced.csv rows are the hub's data/test/ files; the
    two one-image classes of the real subset come through as classes of their own."""
    monkeypatch.setenv("VLBENCH_GITHUB_RAW_ENDPOINT", loopback_hub.endpoint + "/github-raw")
    monkeypatch.setenv("VLBENCH_REFERENCE_CACHE", str(tmp_path / "cache"))
    write_idle_oo_repo(tmp_path / "hub", per_class=3, island_shape=True)
    source = shipped_source("idle-oo-island")
    source.pop("repo")
    source["path"] = str(tmp_path / "hub")
    data = (tmp_path / "hub" / "island-balanced.csv").read_bytes()
    reference = source["reference"]
    loopback_hub.publish_github(reference["repo"], reference["commit"], reference["path"], data)
    source["reference"] = {**reference, "sha256": hashlib.sha256(data).hexdigest()}
    assert "island" in IDLE_SUBSETS
    prepare_benchmark("idle-oo-island", "zeroshot", source, None, tmp_path / "out",
                      {"text_type": "taxon_com"})  # fmt: skip
    images = pl.read_parquet(tmp_path / "out" / "images.parquet", columns=["image_id", "group"])
    counts = dict(images.group_by("group").len().iter_rows())
    taxa = "Animalia Chordata Aves"
    chick = f"{taxa} Procellariiformes Procellariidae   with common name petrel chick"
    chicken = f"{taxa} Galliformes Phasianidae Gallus gallus with common name domestic chicken"
    assert counts[chick] == 1 and counts[chicken] == 1
    assert os.path.basename(images["image_id"][0]).endswith(".png")


def test_a_transient_failure_is_retried_and_an_unreachable_server_says_what_to_do(
    served, tmp_path, loopback_hub, monkeypatch
) -> None:
    source, rows = served
    loopback_hub.fail(RARE_PATH, status=503)
    images = prepare(source, tmp_path / "out")  # the second attempt succeeds
    assert len(images) == len(rows) and loopback_hub.served("GET", RARE_PATH) == [503, 200]
    monkeypatch.setenv("VLBENCH_REFERENCE_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("VLBENCH_GITHUB_RAW_ENDPOINT", "http://127.0.0.1:9")  # nothing listens
    monkeypatch.setattr(download, "ATTEMPTS", 2)
    with pytest.raises(VlbenchError) as error:
        prepare(source, tmp_path / "again")
    message = str(error.value)
    assert "could not be fetched after 2 attempts" in message and "\n" not in message
    assert f"put a copy of the file at {tmp_path / 'empty-cache'}" in message
