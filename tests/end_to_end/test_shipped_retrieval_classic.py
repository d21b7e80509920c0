"""config/retrieval-classic.yaml run as shipped on miniatures of its sources in their real
layouts (the nlphuji CSV + zip and clip-benchmark webdataset repositories at their pinned
commits, Karpathy JSON folders under data_root): open_clip's and the CLIP paper's Flickr30k /
COCO tables are filled for every configured model."""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest
from clip_benchmark.cli import main_build
from shipped_configs import check_every_cell_filled, check_standings, run_against_a_loopback_hub

NAME = "retrieval-classic"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    workdir = tmp_path_factory.mktemp(NAME)
    return workdir, run_against_a_loopback_hub(NAME, workdir)


def test_every_cell_of_every_configured_model_is_filled(run) -> None:
    check_every_cell_filled(*run, NAME)


@pytest.mark.parametrize(
    ("benchmark", "images"),
    [("flickr30k-1k", 4), ("coco-5k", 4), ("flickr30k-1k-wds", 4), ("coco-5k-wds", 4),
     ("flickr30k-full", 3), ("coco-full", 3)],
)  # fmt: skip
def test_each_layout_counts_its_queries(run, benchmark: str, images: int) -> None:
    """Image queries are the (test) images; every image has five captions, each a text query."""
    workdir, _ = run
    table = pl.read_csv(workdir / "results" / "tables" / "metrics_full.csv")
    recall = table.filter((pl.col("benchmark") == benchmark) & (pl.col("metric") == "recall"))
    counts = dict(recall.group_by("direction").agg(pl.col("n_queries").max()).iter_rows())
    assert counts == {"image_to_text": images, "text_to_image": 5 * images}


def test_standings_and_clip_benchmark_files(run, tmp_path: Path) -> None:
    """The standings agree with scipy and statsmodels, and clip_benchmark's own `build` reads
    every (model, benchmark): the webdataset layouts under clip_benchmark's dataset names, each
    recall our hit rate of its direction."""
    workdir, _ = run
    check_standings(workdir)
    out = tmp_path / "benchmark.csv"
    main_build(SimpleNamespace(files=[str(workdir / "results/clip_benchmark")], output=str(out)))
    rows = csv.DictReader(out.open())
    built = {(row["vlbench_benchmark"], row["vlbench_model"]): row for row in rows}
    metrics = pl.read_csv(workdir / "results" / "tables" / "metrics.csv")
    recall = metrics.filter(pl.col("metric") == "recall")
    assert set(built) == set(recall.select("benchmark", "model").unique().iter_rows())
    names = {"text_to_image": "image_retrieval", "image_to_text": "text_retrieval"}
    for row in recall.iter_rows(named=True):
        ours = built[row["benchmark"], row["model"]]
        assert float(ours[f"{names[row['direction']]}_recall@{row['k']}"]) == pytest.approx(
            row["value"] / 100
        )
    datasets = {key[0]: row["dataset"] for key, row in built.items()}
    assert datasets["flickr30k-1k-wds"] == "wds/flickr30k"
    assert datasets["coco-5k-wds"] == "wds/mscoco_captions"
    assert datasets["flickr30k-1k"] == "flickr30k-1k"
