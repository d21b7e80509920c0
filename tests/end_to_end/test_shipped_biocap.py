"""config/biocap.yaml run as shipped on miniatures of its sources in their real layouts and
shapes (hub repositories at the pinned commits, IDLE-OO pinned on first use, BioCAP's own
annotation files for Rare Species and the IDLE-OO subsets from a loopback GitHub, the ten
user-supplied folders made by `vlbench import` from their publishers' layouts; IDLE-OO island
with its two one-image classes): BioCAP Tables 1 and 2, BioCLIP 2's zero-shot table and BioCLIP's
few-shot table are filled for every configured model, and island's five-shot, which the real data
cannot run either, is named as not computable."""

from __future__ import annotations

import subprocess
from pathlib import Path

import polars as pl
import pytest
from shipped_configs import (
    check_every_cell_filled,
    check_standings,
    paper_tables,
    run_against_a_loopback_hub,
    shipped,
    table_rows,
)

from vlbench.report.paper_layouts import CAMERA_TRAP_SUBSETS

NAME = "biocap"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    workdir = tmp_path_factory.mktemp(NAME)
    return workdir, run_against_a_loopback_hub(NAME, workdir)


def metrics(workdir: Path) -> pl.DataFrame:
    return pl.read_csv(workdir / "results" / "tables" / "metrics_full.csv")


def test_every_cell_of_every_configured_model_is_filled(run) -> None:
    # In BioCLIP's few-shot table, the Rare Species card's two rows biocap.yaml does not run.
    tables = check_every_cell_filled(*run, NAME, {"bioclip-fewshot": {"not configured"}})
    # Every system of BioCAP's Table 1 and Table 2 runs (FG-CLIP, and BioTrove-CLIP's three
    # candidate checkpoints, each a row beside the one published cell).
    for table in ("biocap-table1", "biocap-table2"):
        assert "not reproducible" not in tables[table]["reasons"], tables[table]["line"]
    rows = {row["model_key"]: row for row in table_rows(run[0], "biocap-table1")}
    for key in ("biotrove-clip-o", "biotrove-clip-b", "biotrove-clip-m"):
        assert rows[key]["reference_model"] == "BioTrove-CLIP"
    assert rows["fg-clip"]["reference_model"] == "FG-CLIP"


def test_camera_trap_is_the_mean_of_the_five_subsets(run) -> None:
    workdir, _ = run
    rows = metrics(workdir).filter(
        pl.col("benchmark").str.starts_with("idle-oo-")
        & (pl.col("metric") == "zeroshot_top1_accuracy")
    )
    assert sorted(rows["subset"].unique()) == sorted(CAMERA_TRAP_SUBSETS)
    for row in table_rows(workdir, "biocap-table1"):
        if row["model_key"]:
            ours = rows.filter(pl.col("model") == row["model_key"])["value"].mean()
            assert float(row["Camera Trap ours"]) == pytest.approx(ours), row["model_key"]


def test_inquire_columns_come_from_the_capitalised_supercategories(run) -> None:
    workdir, _ = run
    inquire = metrics(workdir).filter(
        (pl.col("benchmark") == "inquire-rerank") & (pl.col("metric") == "average_precision")
    )
    # Beside the overall rows, one per supercategory, which INQUIRE's data capitalises.
    assert set(inquire["subset"]) == {"test", "Appearance", "Behavior", "Context", "Species"}
    for row in table_rows(workdir, "biocap-table2"):
        if row["model_key"]:
            assert all(row[f"INQUIRE {name} ours"] for name in ("Appearance", "Species"))


def test_every_source_format_of_the_config_reaches_the_metrics(run) -> None:
    """Each benchmark (hub image folders, user folders, INQUIRE parquet, annotation CSVs) has
    metric rows for every model, with the fixture's query counts."""
    workdir, _ = run
    table = metrics(workdir)
    config = shipped(NAME)
    assert set(table["benchmark"]) == set(config["benchmarks"])
    assert set(table["model"]) == set(config["models"])
    counts = dict(
        table.filter(pl.col("metric").is_in(["zeroshot_top1_accuracy", "recall"]))
        .group_by("benchmark")
        .agg(pl.col("n_queries").max())
        .iter_rows()
    )
    assert counts["rare-species"] == 3 * 6 + 5 and counts["nabirds"] == 4 * 6
    assert counts["idle-oo-ena24"] == 4 * 6 and counts["metaalbum-fungi"] == 2 * 6
    assert counts["idle-oo-island"] == 3 * 6 + 2  # and two one-image classes
    assert counts["cornell-bird"] == 2 and counts["plantid"] == 2


def test_fewshot_runs_on_every_zero_shot_benchmark(run) -> None:
    """One- and five-shot accuracy of every model on every zero-shot benchmark, from the cached
    image embeddings; Rare Species' sit in BioCLIP's few-shot table beside the zero-shot cell."""
    workdir, _ = run
    fewshot = metrics(workdir).filter(pl.col("direction") == "image_to_image")
    benchmarks = shipped(NAME)["benchmarks"]
    zeroshot = {key for key, spec in benchmarks.items() if spec["protocol"] == "zeroshot"}
    assert set(fewshot["benchmark"]) == zeroshot
    assert set(fewshot["k"]) == {1, 5}
    assert "bioclip-fewshot" in paper_tables(workdir)


def test_island_five_shot_is_not_computable_and_named_while_every_table_is_written(run) -> None:
    """The real island subset has two one-image classes under taxon_com: its five-shot cannot
    run (BioCLIP's few_shot.py stops there); it is recorded with the classes and their counts in
    the metric file, metrics_full.csv, not_run.csv and the run's last lines, and every other
    cell, one-shot on island included, is written."""
    workdir, result = run
    fewshot = metrics(workdir).filter(
        (pl.col("benchmark") == "idle-oo-island") & (pl.col("metric") == "fewshot_accuracy")
    )
    five = fewshot.filter(pl.col("k") == 5)
    assert five.height == len(shipped(NAME)["models"]) and five["value"].null_count() == five.height
    reason = five["not_computable"][0]
    assert "2 class(es) with fewer than 5 images" in reason
    assert "with common name domestic chicken' (1)" in reason
    assert "with common name petrel chick' (1)" in reason
    assert fewshot.filter(pl.col("k") == 1)["value"].null_count() == 0
    rows = (workdir / "results" / "tables" / "not_run.csv").read_text(encoding="utf-8")
    assert "metric,idle-oo-island/island fewshot_accuracy@5,not computable," in rows
    assert "vlbench: not computable: idle-oo-island/island fewshot_accuracy@5" in result.stderr
    other = metrics(workdir).filter(pl.col("not_computable").is_not_null())
    assert set(other["benchmark"]) == {"idle-oo-island"}  # nothing else is short
    assert set(paper_tables(workdir)) == {
        "biocap-table1", "biocap-table2", "bioclip2-zeroshot", "bioclip-fewshot",
    }  # fmt: skip


def test_rare_species_and_the_camera_traps_follow_their_reference_files(run) -> None:
    """The prepared images are the reference CSV's rows in its order (not the hub's), their
    classes written from its columns."""
    import csv

    workdir, _ = run
    served = workdir / "fixtures" / "hub" / "imageomics" / "rare-species"
    from shipped_configs import REFERENCE_FIXTURES

    reference = REFERENCE_FIXTURES[
        ("Imageomics/biocap", "data/classification_annotation/rare_species/metadata.csv")
    ](served)
    rows = list(csv.DictReader(reference.decode("utf-8").splitlines()))
    images = pl.read_parquet(workdir / "results" / "data" / "rare-species" / "images.parquet")
    assert images["image_id"].to_list() == [row["filepath"] for row in rows]
    first = rows[0]
    assert images["group"][0] == (
        f"{first['kingdom']} {first['phylum']} {first['cls']} {first['order']} "
        f"{first['family']} {first['genus']} {first['species']}"
        + (f" with common name {first['common_name']}" if first["common_name"] else "")
    )
    island = pl.read_parquet(workdir / "results" / "data" / "idle-oo-island" / "images.parquet")
    hub_csv = served.parent / "IDLE-OO-Camera-Traps" / "island-balanced.csv"
    with open(hub_csv, newline="", encoding="utf-8") as handle:
        assert island["image_id"].to_list() == [row["filepath"] for row in csv.DictReader(handle)]


def test_standings_equal_an_independent_ranking_and_holm(run) -> None:
    """Every column of every BioCAP benchmark (each query group of INQUIRE a column of its own)
    against scipy and statsmodels (shipped_configs.check_standings)."""
    standings = check_standings(run[0])
    assert standings["n_models"].max() >= 2
