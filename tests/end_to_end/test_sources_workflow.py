"""Each source layout, built in miniature, runs through the whole workflow to metric rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml
from fixtures_sources import (
    write_annotation_pairs,
    write_biovita_repo,
    write_inquire_repo,
    write_karpathy,
    write_nlphuji_repo,
    write_rare_species_repo,
    write_wds_repo,
)
from workflow_helpers import run_workflow, tiny_model, write_config

from vlbench.data.synthetic import write_synthetic_biomedflickr


def benchmarks(root: Path) -> dict[str, dict[str, Any]]:
    """One benchmark per source format, each built in miniature under `root`."""
    write_synthetic_biomedflickr(root / "BioMedFlickr", pairs=12, seed=2)
    write_annotation_pairs(root / "cornell", n=10)
    write_nlphuji_repo(root / "nlphuji", n_images=6)
    write_wds_repo(root / "wds", n_images=6, per_shard=4)
    write_karpathy(root / "karpathy", per_split={"train": 4, "val": 2, "test": 3})
    write_biovita_repo(root / "biovita", n_queries=10)
    write_rare_species_repo(root / "rare", per_class=2)
    write_inquire_repo(root / "inquire", n_queries=4, per_query=8)
    return {
        "biomedflickr": {
            "protocol": "paired",
            "source": {"path": str(root / "BioMedFlickr"), "expected": {"images": 12}},
            "k": [1, 10],
        },
        "cornell-bird": {
            "protocol": "paired",
            "prompt_prefix": "a photo of",
            "source": {
                "path": str(root / "cornell"),
                "format": "annotation_csv",
                "annotations": "annotations.csv",
                "images": "images",
            },
            "k": [1, 5, 10],
        },
        "flickr-nlphuji": {
            "protocol": "multi_positive",
            "source": {
                "path": str(root / "nlphuji"),
                "format": "nlphuji_csv_zip",
                "annotations": "test_1k_flickr.csv",
                "archive": "images_flickr_1k_test.zip",
            },
            "k": [1, 5, 10],
        },
        "flickr-wds": {
            "protocol": "multi_positive",
            "source": {"path": str(root / "wds"), "format": "clip_benchmark_wds"},
            "k": [1, 5, 10],
        },
        "flickr-full": {
            "protocol": "multi_positive",
            "source": {
                "path": str(root / "karpathy"),
                "format": "karpathy_json",
                "annotations": "dataset_flickr30k.json",
                "images": "images",
                "subset": "full",
            },
            "k": [1, 5, 10],
        },
        "biovita-species": {
            "protocol": "taxon_candidates",
            "source": {"path": str(root / "biovita"), "subset": "unseen_species"},
            "k": [1, 5, 10],
        },
        "rare-species": {
            "protocol": "zeroshot",
            "text_type": "taxon_com",
            "source": {"path": str(root / "rare"), "columns": {"file": "file_name"}},
            "k": [1, 5],
        },
        "inquire-rerank": {
            "protocol": "rerank",
            "source": {
                "path": str(root / "inquire"),
                "split": "test",
                "expected": {"candidates_per_query": 8},
            },
            "k": [5],
        },
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One workflow run over every source format (--keep-going: one failure hides no other)."""
    workdir = tmp_path_factory.mktemp("sources")
    config = {
        "models": {"tiny": tiny_model()},
        "benchmarks": benchmarks(workdir / "sources"),
    }
    configfile = write_config(workdir, config)
    # Up to the metrics table: plots, paper tables and provenance are covered by the shared run.
    target = "results/tables/metrics.csv"
    run_workflow(workdir, configfile, target, "--keep-going", "--cores", "2", check=False)
    return workdir


def metric_rows(workdir: Path, benchmark: str, direction: str) -> pl.DataFrame:
    """The per-job metric rows of one benchmark and direction (fails if the job made none)."""
    path = workdir / "results" / "metrics" / "tiny" / benchmark / f"{direction}.csv"
    logs = sorted((workdir / "logs").rglob(f"*{benchmark}*"))
    assert path.is_file(), f"no metrics for {benchmark} {direction}; logs: {logs}"
    return pl.read_csv(path)


@pytest.mark.parametrize(("benchmark", "n"), [("biomedflickr", 12), ("cornell-bird", 10)])
def test_paired_sources(finished: Path, benchmark: str, n: int) -> None:
    for direction in ("image_to_text", "text_to_image"):
        recall = metric_rows(finished, benchmark, direction).filter(pl.col("metric") == "recall")
        assert recall.height >= 2 and set(recall["n_queries"]) == {n}


@pytest.mark.parametrize(
    ("benchmark", "images"), [("flickr-nlphuji", 6), ("flickr-wds", 6), ("flickr-full", 3)]
)
def test_multi_positive_sources(finished: Path, benchmark: str, images: int) -> None:
    i2t = metric_rows(finished, benchmark, "image_to_text").filter(pl.col("metric") == "recall")
    t2i = metric_rows(finished, benchmark, "text_to_image").filter(pl.col("metric") == "recall")
    assert set(i2t["n_queries"]) == {images}
    assert set(t2i["n_queries"]) == {5 * images}


def test_taxon_candidates_source_biovita(finished: Path) -> None:
    rows = metric_rows(finished, "biovita-species", "image_to_text")
    top_k = rows.filter(pl.col("metric") == "taxon_top_k_accuracy")
    assert top_k.height == 3 and set(top_k["n_queries"]) == {10}
    assert set(top_k["subset"]) == {"unseen_species"}


def test_zeroshot_source_rare_species(finished: Path) -> None:
    rows = metric_rows(finished, "rare-species", "image_to_text")
    top1 = rows.filter(pl.col("metric") == "zeroshot_top1_accuracy")
    assert top1.height == 1 and top1["n_queries"][0] == 8


def test_rerank_source_inquire(finished: Path) -> None:
    rows = metric_rows(finished, "inquire-rerank", "text_to_image")
    ap = rows.filter(pl.col("metric") == "average_precision")
    assert ap.height >= 1 and 4 in set(ap["n_queries"])


def test_every_source_reaches_the_metrics_table(finished: Path) -> None:
    path = finished / "results" / "tables" / "metrics.csv"
    assert path.is_file(), "results/tables/metrics.csv was not made (see the tests above)"
    table = pl.read_csv(path)
    configured = yaml.safe_load((finished / "config.yaml").read_text(encoding="utf-8"))
    assert set(table["benchmark"]) == set(configured["benchmarks"])


@pytest.mark.parametrize("missing", ["annotations", "images"])
def test_missing_user_files_are_refused_at_plan_time(tmp_path: Path, missing: str) -> None:
    write_annotation_pairs(tmp_path / "cornell", n=4)
    source = {
        "path": str(tmp_path / "cornell"),
        "format": "annotation_csv",
        "annotations": "annotations.csv",
        "images": "images",
    }
    source[missing] = f"not-there-{missing}"
    config = {
        "models": {"tiny": tiny_model()},
        "benchmarks": {"cornell": {"protocol": "paired", "source": source}},
    }
    configfile = write_config(tmp_path, config)
    plan = run_workflow(tmp_path, configfile, "-n", check=False)
    assert plan.returncode != 0
    path = tmp_path / "cornell" / f"not-there-{missing}"
    assert (
        f"nothing to run: every benchmark misses its local data: benchmark cornell: "
        f"benchmarks.cornell.source.{missing}: not found: {path}"
    ) in plan.stdout + plan.stderr
    assert not (tmp_path / "logs").exists()  # no job was planned to fail on it
