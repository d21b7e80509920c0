"""The shipped demo, BioMedFlickr and BioVITA configs, run as shipped on miniatures of their
sources in the real layouts (tests/support/shipped_configs.py): every paper table cell of every
configured model is filled, and BioVITA's text-to-image hits are mteb's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from loopback_hub import LoopbackHub
from mteb import ResultCache
from mteb.tasks.reranking.eng.biovita import _task_specific_scores as mteb_biovita_scores
from shipped_configs import (
    check_every_cell_filled,
    check_standings,
    paper_tables,
    run_shipped,
    table_rows,
)

CONFIGS = ("config", "biomedflickr", "biovita")


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """One run of each config, against one loopback hub; the BioVITA run also makes its report."""
    hub = LoopbackHub()
    done = {}
    try:
        for name in CONFIGS:
            workdir = tmp_path_factory.mktemp(name)
            # BioVITA's run makes everything (plots, provenance), then the report.
            result = run_shipped(name, workdir, hub, *(["all"] if name == "biovita" else []))
            if name == "biovita" and result.returncode == 0:
                report = run_shipped(name, workdir, hub, "--report", "results/report.html")
                assert report.returncode == 0, report.stderr[-3000:]
            done[name] = (workdir, result)
    finally:
        hub.stop()
    return done


@pytest.mark.parametrize("name", CONFIGS)
def test_every_cell_of_every_configured_model_is_filled(runs, name: str) -> None:
    workdir, result = runs[name]
    tables = check_every_cell_filled(workdir, result, name)
    lines = (workdir / "results" / "tables" / "coverage.md").read_text(encoding="utf-8")
    assert all(coverage["line"] in lines for coverage in tables.values())
    # The run ends with the same lines.
    assert all(coverage["line"] in result.stdout + result.stderr for coverage in tables.values())


def test_biovita_has_both_directions_of_both_subsets(runs) -> None:
    workdir, _ = runs["biovita"]
    ours = {row["model_key"]: row for row in table_rows(workdir, "biovita-unseen")}
    ours.pop("", None)
    assert sorted(ours) == ["bioclip-2", "biovita", "imagebind"]  # every system of the table
    for row in ours.values():
        for level in ("Species", "Genus"):
            for direction in ("I2T", "T2I"):
                for k in (1, 5, 10):
                    assert row[f"{level} {direction} top-{k} ours"], (level, direction, k)
    for key, reference in (("biovita", "BioVITA (Stage2)"), ("imagebind", "ImageBind")):
        assert ours[key]["reference_model"] == reference
        assert ours[key]["Species I2T top-1 published"]  # beside its own published cells


def test_report_leads_with_the_coverage_lines(runs) -> None:
    workdir, _ = runs["biovita"]
    report = (workdir / "results" / "report.html").read_text(encoding="utf-8")
    line = paper_tables(workdir)["biovita-unseen"]["line"]
    assert "Paper tables" in report
    assert report.index("published cells ours") < report.index("About this run")
    assert line.split(":")[0] in report


@pytest.mark.parametrize("subset", ["unseen_species", "unseen_genus"])
def test_biovita_text_to_image_hits_equal_mtebs_scorer(runs, subset: str) -> None:
    """Text queries rank their candidate taxa by the max similarity over each taxon's images,
    ties in candidate order: our hit counts equal mteb's BioVITAT2IReranking scorer fed the
    same embeddings."""
    workdir, _ = runs["biovita"]
    key = f"biovita-t2i-{subset.replace('_', '-')}"
    stem = workdir / "results" / "embeddings" / "bioclip-2" / key
    texts, images = np.load(stem / "text.npy"), np.load(stem / "image.npy")
    text_ids = pq.read_table(stem / "text.ids.parquet").column("id").to_pylist()
    image_ids = pq.read_table(stem / "image.ids.parquet").column("id").to_pylist()
    repo = workdir / "fixtures" / "hub" / "myang333" / "BioVITAT2IRetrieval"
    parts = {
        part: pq.read_table(next((repo / f"{subset}-{part}").glob("*.parquet"))).to_pylist()
        for part in ("corpus", "queries", "top_ranked")
    }
    image_row = {image_id: row for row, image_id in enumerate(image_ids)}
    results = {}
    for text_row, query_id in enumerate(text_ids):
        candidates = next(r["corpus-ids"] for r in parts["top_ranked"] if r["query-id"] == query_id)
        scores = images[[image_row[c] for c in candidates]] @ texts[text_row]
        results[query_id] = dict(zip(candidates, map(float, scores), strict=True))
    queries, corpus = parts["queries"], parts["corpus"]
    task = SimpleNamespace(
        dataset={
            subset: {
                "test": {
                    "queries": {
                        "id": [q["id"] for q in queries],
                        "candidate_taxa": [q["candidate_taxa"] for q in queries],
                        "correct_taxon": [q["correct_taxon"] for q in queries],
                    },
                    "corpus": {
                        "id": [c["id"] for c in corpus],
                        "taxon": [c["taxon"] for c in corpus],
                    },
                }
            }
        }
    )
    expected = mteb_biovita_scores(task, {}, {}, results, "test", subset)
    metrics = pl.read_csv(workdir / "results" / "metrics" / "bioclip-2" / key / "text_to_image.csv")
    for k in (1, 5, 10):
        row = metrics.filter((pl.col("metric") == "taxon_top_k_accuracy") & (pl.col("k") == k))
        n = int(row["n_queries"][0])
        assert n == len(queries)
        assert round(row["value"][0] * n / 100) == round(expected[f"taxon_top_{k}_accuracy"] * n)


def test_unpinned_hub_sources_are_locked_beside_the_config(runs) -> None:
    """BioMedFlickr names no revision: the first run pins it into biomedflickr.lock."""
    workdir, _ = runs["biomedflickr"]
    lock = (workdir / "biomedflickr.lock").read_text(encoding="utf-8")
    assert "Alejandro98/BioMedFlickr" in lock
    meta = json.loads(
        (workdir / "results" / "data" / "biomedflickr" / "benchmark.json").read_text()
    )
    assert meta["revision"] in lock


def test_biovita_mteb_files_load_in_mteb_with_our_main_scores(runs) -> None:
    """mteb's own result cache reads the run's BioVITA files: both tasks for every model, both
    subsets, each main score our top-1 taxon accuracy."""
    workdir, _ = runs["biovita"]
    cache = workdir / "results" / "mteb"
    loaded = ResultCache(cache_path=cache).load_results(include_remote=False)
    metrics = pl.read_csv(workdir / "results" / "tables" / "metrics.csv")
    top1 = {
        (row["model"], row["benchmark"]): row["value"] / 100
        for row in metrics.filter(
            (pl.col("metric") == "taxon_top_k_accuracy") & (pl.col("k") == 1)
        ).iter_rows(named=True)
    }
    seen = {}
    for model in loaded.model_results:
        for task in model.task_results:
            subsets = {entry["hf_subset"]: entry for entry in task.scores["test"]}
            assert set(subsets) == {"unseen_species", "unseen_genus"}
            for entry in subsets.values():
                # The fixture's models are local checkpoints: filed under their keys.
                ours = top1[model.model_name, entry["vlbench_benchmark"]]
                assert entry["main_score"] == pytest.approx(ours)
            seen.setdefault(model.model_name, set()).add(task.task_name)
    assert seen == {
        model: {"BioVITAI2TReranking", "BioVITAT2IReranking"}
        for model in ("bioclip-2", "biovita", "imagebind")
    }


def test_standings_equal_an_independent_ranking_and_holm(runs) -> None:
    """BioVITA's three systems: ranks, intervals and the tied-with-best sets of every column
    against scipy and statsmodels (shipped_configs.check_standings); the demo and BioMedFlickr
    configs' too."""
    standings = check_standings(runs["biovita"][0])
    assert set(standings["n_models"]) == {3}
    for name in ("config", "biomedflickr"):
        check_standings(runs[name][0])
