"""`vlbench score` on files in the documented formats, for every protocol."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from vlbench.cli import main


def args_for(tmp_path, *extra: str) -> list[str]:
    return [
        "score",
        "--queries", str(tmp_path / "queries.npy"),
        "--query-ids", str(tmp_path / "queries.ids.parquet"),
        "--gallery", str(tmp_path / "gallery.npy"),
        "--gallery-ids", str(tmp_path / "gallery.ids.parquet"),
        "--out", str(tmp_path / "metrics.csv"),
        "--bootstrap-samples", "50",
        *extra,
    ]  # fmt: skip


def save(tmp_path, name: str, vectors: np.ndarray, ids: list[str], groups=None) -> None:
    np.save(tmp_path / f"{name}.npy", vectors)
    table = {"id": ids} if groups is None else {"id": ids, "group": groups}
    pl.DataFrame(table).write_parquet(tmp_path / f"{name}.ids.parquet")


def test_paired_scores_unnormalised_embeddings_with_notebook_names(tmp_path) -> None:
    rng = np.random.default_rng(0)
    gallery = rng.normal(size=(20, 8)).astype(np.float32)
    queries = 3.0 * gallery + 0.01 * rng.normal(size=(20, 8)).astype(np.float32)  # not unit
    ids = [f"x{i}" for i in range(20)]
    save(tmp_path, "queries", queries, ids)
    save(tmp_path, "gallery", gallery, ids)
    pl.DataFrame({"query_id": ids, "item_id": ids}).write_parquet(tmp_path / "qrels.parquet")
    code = main(
        args_for(
            tmp_path,
            "--protocol",
            "paired",
            "--qrels",
            str(tmp_path / "qrels.parquet"),
            "--direction",
            "text_to_image",
            "--notebook-columns",
            "--ranks-out",
            str(tmp_path / "ranks.parquet"),
        )
    )
    assert code == 0
    rows = pl.read_csv(tmp_path / "metrics.csv")
    assert rows.columns[:10] == [
        "benchmark", "subset", "model", "direction", "metric", "k", "value", "ci_low",
        "ci_high", "n_queries",
    ]  # fmt: skip
    r1 = rows.filter((pl.col("metric") == "recall") & (pl.col("k") == 1)).row(0, named=True)
    assert r1["value"] == 100.0 and r1["notebook_column"] == "I2T R@1"
    assert r1["chance_flag"] is False
    assert pl.read_parquet(tmp_path / "ranks.parquet")["rank"].to_list() == [1] * 20


def test_taxon_candidates_and_zeroshot(tmp_path) -> None:
    gallery = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], dtype=np.float32)
    save(tmp_path, "gallery", gallery, ["a1", "a2", "b1", "b2"], ["A", "A", "B", "B"])
    queries = np.array([[1, 0.05], [0.05, 1], [1, 0]], dtype=np.float32)
    save(tmp_path, "queries", queries, ["q1", "q2", "q3"], ["A", "B", "B"])
    pl.DataFrame(
        {
            "query_id": ["q1", "q2", "q3"],
            "candidate_ids": [["a1", "a2", "b1", "b2"]] * 3,
            "candidate_groups": [["B", "A"], ["A", "B"], ["B", "A"]],
        }
    ).write_parquet(tmp_path / "candidates.parquet")
    assert (
        main(
            args_for(
                tmp_path,
                "--protocol",
                "taxon_candidates",
                "--k",
                "1",
                "--candidates",
                str(tmp_path / "candidates.parquet"),
            )
        )
        == 0
    )
    rows = pl.read_csv(tmp_path / "metrics.csv").filter(pl.col("metric") == "taxon_top_k_accuracy")
    assert rows["value"].to_list() == pytest.approx([200 / 3])
    per_class = tmp_path / "per_class.csv"
    assert (
        main(args_for(tmp_path, "--protocol", "zeroshot", "--per-class-out", str(per_class))) == 0
    )
    metrics = pl.read_csv(tmp_path / "metrics.csv")
    assert set(metrics["metric"]) == {
        "zeroshot_top1_accuracy", "zeroshot_top5_accuracy", "balanced_accuracy",
    }  # fmt: skip
    classes = pl.read_csv(per_class)
    assert classes["class"].to_list() == ["A", "B"]
    assert classes["top1_accuracy"].to_list() == [100.0, 50.0]


def test_bad_input_is_one_line_naming_the_file(tmp_path, capsys) -> None:
    save(tmp_path, "queries", np.ones((2, 3), np.float32), ["q1", "q2"])
    save(tmp_path, "gallery", np.ones((2, 3), np.float32), ["g1", "g2"])
    pl.DataFrame({"query": ["q1"]}).write_parquet(tmp_path / "qrels.parquet")
    code = main(
        args_for(tmp_path, "--protocol", "paired", "--qrels", str(tmp_path / "qrels.parquet"))
    )
    error = capsys.readouterr().err.strip()
    assert code == 1
    assert "qrels.parquet" in error and "query_id" in error and "\n" not in error
