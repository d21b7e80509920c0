"""Result files in other tools' formats, read back by those tools' own code: mteb's TaskResult
and ResultCache for BioVITA, clip_benchmark's `build` for retrieval and zero-shot."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest
from clip_benchmark.cli import main_build
from mteb import ResultCache, TaskResult

from vlbench.report.clip_benchmark_results import clip_benchmark_files
from vlbench.report.mteb_results import mteb_task_files

I2T_REVISION = "fa7f2ac1456130e7158958e4324f981bb5308668"


def _row(benchmark: str, subset: str, model: str, direction: str, metric: str, k, value):
    return {
        "benchmark": benchmark,
        "subset": subset,
        "model": model,
        "direction": direction,
        "metric": metric,
        "k": k,
        "value": value,
    }


def _write(folder: Path, files: dict[str, dict]) -> None:
    for name, record in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(record), encoding="utf-8")


BIOVITA_METRICS = pl.DataFrame(
    [
        _row(bench, subset, model, "image_to_text", "taxon_top_k_accuracy", k, value)
        for bench, subset in (("bv-species", "unseen_species"), ("bv-genus", "unseen_genus"))
        for model, base in (("bioclip-2", 30.0), ("local", 10.0))
        for k, value in ((1, base + len(subset)), (5, base + 40), (10, base + 50))
    ]
    + [_row("bv-species", "unseen_species", "bioclip-2", "image_to_text", "mrr", None, 44.0)],
    schema_overrides={"k": pl.Int64},
)
BIOVITA_META = {
    bench: {"repo": "myang333/BioVITAI2TRetrieval", "revision": I2T_REVISION, "subset": subset}
    for bench, subset in (("bv-species", "unseen_species"), ("bv-genus", "unseen_genus"))
}
MODELS = {
    "bioclip-2": {"name": "hf-hub:imageomics/bioclip-2", "revision": "2957b322"},
    "local": {"name": "ViT-B-32", "pretrained": "/data/ckpt/local.pt"},
}


def test_mteb_loads_our_biovita_files_with_our_main_scores(tmp_path: Path) -> None:
    files = mteb_task_files(BIOVITA_METRICS, BIOVITA_META, MODELS)
    _write(tmp_path, files)
    path = tmp_path / "results/imageomics__bioclip-2/2957b322/BioVITAI2TReranking.json"
    result = TaskResult.from_disk(path)
    assert result.task_name == "BioVITAI2TReranking"
    assert result.dataset_revision == I2T_REVISION
    assert result.mteb_version is None  # mteb did not compute them
    expected = {"unseen_species": 0.44, "unseen_genus": 0.42}
    by_subset = {entry["hf_subset"]: entry for entry in result.scores["test"]}
    assert {s: e["main_score"] for s, e in by_subset.items()} == pytest.approx(expected)
    assert by_subset["unseen_genus"]["taxon_top_5_accuracy"] == pytest.approx(0.70)
    assert result.main_score == pytest.approx(sum(expected.values()) / 2)
    # mteb's folder loader, as a user would point it at results/mteb (no network).
    loaded = ResultCache(cache_path=tmp_path).load_results(
        tasks=["BioVITAI2TReranking"], include_remote=False, validate_and_filter=True
    )
    scores = {
        (model.model_name, task.task_name): task.get_score()
        for model in loaded.model_results
        for task in model.task_results
    }
    assert scores == pytest.approx(
        {
            ("imageomics/bioclip-2", "BioVITAI2TReranking"): 0.43,
            ("local", "BioVITAI2TReranking"): 0.23,
        }
    )


def test_mteb_files_refuse_two_benchmarks_for_one_subset() -> None:
    meta = {**BIOVITA_META, "bv-genus": {**BIOVITA_META["bv-genus"], "subset": "unseen_species"}}
    metrics = BIOVITA_METRICS.with_columns(
        pl.when(pl.col("benchmark") == "bv-genus")
        .then(pl.lit("unseen_species"))
        .otherwise(pl.col("subset"))
        .alias("subset")
    )
    with pytest.raises(ValueError, match="two benchmarks hold subset 'unseen_species'"):
        mteb_task_files(metrics, meta, MODELS)


def test_clip_benchmark_build_reads_our_files(tmp_path: Path, monkeypatch) -> None:
    metrics = pl.DataFrame(
        [
            _row("flickr", "test", "bioclip-2", direction, "recall", k, value)
            for direction, base in (("text_to_image", 50.0), ("image_to_text", 70.0))
            for k, value in ((1, base), (5, base + 20))
        ]
        + [_row("flickr", "test", "bioclip-2", "text_to_image", "mrr", None, 60.0)]
        + [
            _row("birds", "test", "local", "image_to_text", metric, k, value)
            for metric, k, value in (
                ("zeroshot_top1_accuracy", 1, 40.0),
                ("zeroshot_top5_accuracy", 5, 75.0),
                ("balanced_accuracy", 1, 38.5),
            )
        ]
        + [
            {**_row("birds", "test", "local", "image_to_image", metric, k, value), "n_folds": 5}
            for k, metric, value in (
                (16, "lp_acc1", 61.0),
                (16, "lp_acc5", 90.0),
                (16, "lp_mean_per_class_recall", 58.0),
                (4, "lp_acc1", 44.0),
            )
        ],
        schema_overrides={"k": pl.Int64},
    )
    meta = {
        "flickr": {"protocol": "paired", "repo": "clip-benchmark/wds_flickr30k", "subset": "test"},
        "birds": {"protocol": "zeroshot", "subset": "test"},
    }
    _write(tmp_path, clip_benchmark_files(metrics, meta, MODELS))
    out = tmp_path / "benchmark.csv"
    monkeypatch.chdir(tmp_path)
    main_build(SimpleNamespace(files=[str(tmp_path)], output=str(out)))
    rows = {
        (row["dataset"], row["task"], row["fewshot_k"]): row for row in csv.DictReader(out.open())
    }
    flickr = rows["wds/flickr30k", "zeroshot_retrieval", ""]
    birds = rows["birds", "zeroshot_classification", ""]
    assert flickr["task"] == "zeroshot_retrieval"
    assert float(flickr["image_retrieval_recall@1"]) == pytest.approx(0.50)  # text -> image
    assert float(flickr["text_retrieval_recall@5"]) == pytest.approx(0.90)  # image -> text
    assert flickr["model_fullname"] == "hf-hub:imageomics/bioclip-2 2957b322"
    assert birds["task"] == "zeroshot_classification"
    assert (float(birds["acc1"]), float(birds["acc5"])) == pytest.approx((0.40, 0.75))
    assert float(birds["mean_per_class_recall"]) == pytest.approx(0.385)
    assert birds["model_fullname"] == "ViT-B-32 local.pt"
    probe = rows["birds", "linear_probe", "16"]  # one file per k, clip_benchmark's metric names
    assert (float(probe["lp_acc1"]), float(probe["lp_acc5"])) == pytest.approx((0.61, 0.90))
    assert float(probe["lp_mean_per_class_recall"]) == pytest.approx(0.58)
    assert (probe["normalized"], probe["vlbench_folds"]) == ("True", "5")
    assert rows["birds", "linear_probe", "4"]["lp_acc5"] == ""  # not computed for that k
