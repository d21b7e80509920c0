"""The workflow's rank and metrics jobs on hand-made canonical layouts of each protocol."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from workflow_helpers import validate

from vlbench.data.canonical import CANDIDATES_SCHEMA, IMAGES_SCHEMA, QRELS_SCHEMA, TEXTS_SCHEMA
from vlbench.embedding.matrix_files import MatrixFiles, save_matrix
from vlbench.metrics.job import write_metrics, write_per_class
from vlbench.planning.targets import fewshot_metric_files, metric_files, metrics_extra_targets
from vlbench.protocols import PROTOCOLS
from vlbench.rank.index import build_flat_index
from vlbench.rank.job import rank_direction


def canonical(root: Path, images, texts, qrels, candidates=()) -> Path:
    """images/texts: (id, group, vector); qrels: (image_id, text_id, relevance)."""
    data = root / "data"
    data.mkdir()
    for name, schema, rows in [("images", IMAGES_SCHEMA, images), ("texts", TEXTS_SCHEMA, texts)]:
        ids, groups = [r[0] for r in rows], [r[1] for r in rows]
        payload = [b""] * len(rows) if name == "images" else ["t"] * len(rows)
        pq.write_table(pa.table([ids, payload, groups], schema=schema), data / f"{name}.parquet")
        matrix = np.array([r[2] for r in rows], dtype=np.float32)
        save_matrix(MatrixFiles.at(root / name), ids, matrix, {})
        build_flat_index(root / f"{name}.npy", root / f"{name}.faiss")
    columns = list(zip(*qrels, strict=True)) if qrels else [[], [], []]
    pq.write_table(pa.table(columns, schema=QRELS_SCHEMA), data / "qrels.parquet")
    columns = list(zip(*candidates, strict=True)) if candidates else [[], [], [], []]
    pq.write_table(pa.table(columns, schema=CANDIDATES_SCHEMA), data / "candidates.parquet")
    return data


def run(root: Path, protocol: str, direction: str, ks: list[int]) -> pl.DataFrame:
    query, gallery = ("images", "texts") if direction == "image_to_text" else ("texts", "images")
    rank_direction(
        PROTOCOLS[protocol],
        direction,
        root / f"{query}.npy",
        root / f"{query}.ids.parquet",
        root / f"{gallery}.faiss",
        root / f"{gallery}.ids.parquet",
        root / "data",
        root / "ranks.parquet",
    )
    labels = {"benchmark": "b", "subset": "test", "model": "m", "direction": direction}
    write_metrics(
        root / "ranks.parquet",
        PROTOCOLS[protocol],
        ks,
        labels,
        "index",
        {"bootstrap_samples": 20},
        root / "metrics.csv",
        root / "outcomes.parquet",
    )
    return pl.read_csv(root / "metrics.csv")


def value(rows: pl.DataFrame, metric: str, k: int | None, subset: str = "test") -> float:
    picked = rows.filter(
        (pl.col("metric") == metric)
        & (pl.col("subset") == subset)
        & (pl.col("k").is_null() if k is None else pl.col("k") == k)
    )
    return picked["value"].item()


def test_zeroshot_job_uses_prompt_prototypes_and_writes_per_class(tmp_path: Path) -> None:
    texts = [
        ("p0", "cat", [1, 0, 0]),
        ("p1", "cat", [0.8, 0.6, 0]),
        ("p2", "dog", [0, 1, 0]),
        ("p3", "owl", [0, 0, 1]),
    ]
    images = [
        ("i0", "cat", [1, 0.2, 0]),
        ("i1", "dog", [0.1, 1, 0]),
        ("i2", "owl", [1, 0, 0.1]),  # wrong: closest to cat
    ]
    canonical(tmp_path, images, texts, [])
    rows = run(tmp_path, "zeroshot", "image_to_text", [1])
    assert value(rows, "zeroshot_top1_accuracy", 1) == pytest.approx(200 / 3)
    assert value(rows, "zeroshot_top5_accuracy", 5) == 100.0
    write_per_class(tmp_path / "ranks.parquet", {"model": "m"}, tmp_path / "per_class.csv")
    per_class = pl.read_csv(tmp_path / "per_class.csv")
    assert dict(zip(per_class["class"], per_class["top1_accuracy"], strict=True)) == {
        "cat": 100.0,
        "dog": 100.0,
        "owl": 0.0,
    }


def test_rerank_job_restricts_to_candidates_and_reports_groups(tmp_path: Path) -> None:
    images = [(f"i{i}", None, [np.cos(i / 3), np.sin(i / 3)]) for i in range(8)]
    texts = [("q0", "species", [1, 0]), ("q1", "behavior", [0, 1])]
    qrels = [("i1", "q0", 1), ("i3", "q0", 0), ("i5", "q1", 1), ("i6", "q1", 1)]
    candidates = [
        ("text", "q0", ["i3", "i1", "i7"], None),
        ("text", "q1", ["i5", "i0", "i6", "i2"], None),
    ]
    canonical(tmp_path, images, texts, qrels, candidates)
    rows = run(tmp_path, "rerank", "text_to_image", [2])
    ranks = pl.read_parquet(tmp_path / "ranks.parquet")
    assert ranks["gallery_size"].to_list() == [3, 4, 4]
    # q0: candidates scored cos(i/3): i1 first -> AP 1; q1: [1,0]·… ranks i5, i6 on top -> AP 1
    assert value(rows, "average_precision", None, "species") == 100.0
    assert set(rows["subset"]) == {"test", "species", "behavior"}


def test_targets_follow_each_protocols_directions() -> None:
    config = {
        "models": {"a": {}, "b": {}},
        "benchmarks": {"zs": {"protocol": "zeroshot"}, "pp": {"protocol": "paired"}},
    }
    files = metric_files(config)
    assert "results/metrics/a/zs/image_to_text.csv" in files
    assert "results/metrics/a/zs/text_to_image.csv" not in files
    assert "results/metrics/b/pp/text_to_image.csv" in files
    extra = metrics_extra_targets(config)
    assert "results/metrics/a/zs/per_class.csv" in extra
    assert "results/tables/paired_tests.csv" in extra


def test_fewshot_metric_files_for_labelled_images_with_shots_only() -> None:
    config = validate(
        {
            "models": {"a": {"name": "x"}, "b": {"name": "y"}},
            "benchmarks": {
                "zs": {"protocol": "zeroshot", "source": {"path": "zs"}},
                "off": {"protocol": "zeroshot", "source": {"path": "o"}, "fewshot": {"shots": []}},
                "pp": {"protocol": "paired", "source": {"path": "pp"}},
            },
        }
    )
    assert config["benchmarks"]["zs"]["fewshot"] == {
        "shots": [1, 5],
        "folds": 5,
        "shuffle": "in_place",
    }
    assert fewshot_metric_files(config) == [
        "results/metrics/a/zs/fewshot.csv",
        "results/metrics/b/zs/fewshot.csv",
    ]
    assert not set(fewshot_metric_files(config)) & set(metric_files(config))
