"""config/biocap.yaml run as shipped on miniatures of its sources in their real layouts (hub
repositories at the pinned commits, IDLE-OO pinned on first use, the ten user-supplied folders
made by `vlbench import` from their publishers' layouts): BioCAP Tables 1 and 2, BioCLIP 2's
zero-shot table and BioCLIP's few-shot table are filled for every configured model."""

from __future__ import annotations

import subprocess
from pathlib import Path

import polars as pl
import pytest
from shipped_configs import (
    check_every_cell_filled,
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
    # FG-CLIP and BioTrove-CLIP are the published rows no config reproduces.
    reasons = tables["biocap-table1"]["reasons"]["not reproducible"]
    assert {detail.split(":")[0] for detail in reasons} == {"FG-CLIP", "BioTrove-CLIP"}


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
    assert counts["rare-species"] == 4 * 6 and counts["nabirds"] == 4 * 6
    assert counts["idle-oo-island"] == 4 * 6 and counts["metaalbum-fungi"] == 2 * 6
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
