"""`vlbench score` on files in the documented formats, for every protocol."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
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


def paired_args(tmp_path, *extra: str) -> list[str]:
    """`args_for` a paired run, image queries, with the qrels file the test wrote."""
    qrels = str(tmp_path / "qrels.parquet")
    return args_for(
        tmp_path, "--protocol", "paired", "--direction", "image_to_text", "--qrels", qrels, *extra
    )


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
                "--direction",
                "image_to_text",
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
        args_for(
            tmp_path,
            "--protocol",
            "paired",
            "--direction",
            "image_to_text",
            "--qrels",
            str(tmp_path / "qrels.parquet"),
        )
    )
    error = capsys.readouterr().err.strip()
    assert code == 1
    assert "qrels.parquet" in error and "query_id" in error and "\n" not in error


def paired_files(tmp_path) -> None:
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(6, 4)).astype(np.float32)
    ids = [f"x{i}" for i in range(6)]
    save(tmp_path, "queries", vectors, ids)
    save(tmp_path, "gallery", vectors, ids)
    pl.DataFrame({"query_id": ids, "item_id": ids}).write_parquet(tmp_path / "qrels.parquet")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--k", "99999999999999999999"),
        ("--k", "0"),
        ("--block-mb", "0"),
        ("--confidence", "2"),
        ("--confidence", "0"),
        ("--confidence", "nan"),
        ("--bootstrap-samples", "-5"),
        ("--seed", "-1"),
        ("--out", "DIRECTORY"),
        ("--ranks-out", "DIRECTORY"),
    ],
)
def test_bad_option_value_is_one_line_naming_the_option(tmp_path, capsys, option, value) -> None:
    paired_files(tmp_path)
    value = str(tmp_path) if value == "DIRECTORY" else value
    with pytest.raises(SystemExit) as info:
        main(paired_args(tmp_path, option, value))
    assert info.value.code == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error
    assert error.strip().splitlines()[-1].startswith(f"vlbench score: error: argument {option}:")
    assert not (tmp_path / "metrics.csv").exists()


def test_out_dash_writes_the_csv_to_stdout(tmp_path, capsys, monkeypatch) -> None:
    paired_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(paired_args(tmp_path, "--out", "-")) == 0
    captured = capsys.readouterr()
    rows = pl.read_csv(captured.out.encode())
    assert rows.columns[:3] == ["benchmark", "subset", "model"]
    assert rows.filter(pl.col("metric") == "recall")["value"].to_list() == [100.0] * 3
    assert "metric rows to stdout" in captured.err
    assert not (tmp_path / "-").exists() and not (tmp_path / "metrics.csv").exists()


def test_complex_embeddings_are_refused_naming_the_file(tmp_path, capsys) -> None:
    paired_files(tmp_path)
    vectors = np.load(tmp_path / "queries.npy").astype(np.complex64) * (1 + 1j)
    np.save(tmp_path / "queries.npy", vectors)
    assert main(paired_args(tmp_path)) == 1
    error = capsys.readouterr().err.strip()
    assert "queries.npy" in error and "complex" in error and "\n" not in error
    assert not (tmp_path / "metrics.csv").exists()


def test_workflow_qrels_and_candidates_are_read_for_the_scored_direction(tmp_path, capsys):
    """qrels.parquet (image_id, text_id) as the workflow writes it: the direction maps the ids."""
    from vlbench.data.canonical import CANDIDATES_SCHEMA, QRELS_SCHEMA

    images = np.array([[1, 0, 0], [0, 1, 0]], dtype=np.float32)
    texts = np.array([[1, 0.1, 0], [0.9, 0, 0.2], [0, 1, 0.1], [0.1, 0.9, 0]], dtype=np.float32)
    image_ids, text_ids = ["i0", "i1"], ["t0", "t1", "t2", "t3"]
    judged = [("i0", "t0"), ("i0", "t1"), ("i1", "t2"), ("i1", "t3")]
    qrels = pa.table(
        {
            "image_id": [i for i, _ in judged],
            "text_id": [t for _, t in judged],
            "relevance": [1] * 4,
        },
        schema=QRELS_SCHEMA,
    )
    pq.write_table(qrels, tmp_path / "qrels.parquet")
    candidates = pa.table(
        {
            "query_modality": ["image"] * 2 + ["text"] * 4,
            "query_id": image_ids + text_ids,
            "candidate_ids": [text_ids] * 2 + [image_ids] * 4,
            "candidate_groups": [None] * 6,
        },
        schema=CANDIDATES_SCHEMA,
    )
    pq.write_table(candidates, tmp_path / "candidates.parquet")
    files = ["--qrels", str(tmp_path / "qrels.parquet")]
    files += ["--candidates", str(tmp_path / "candidates.parquet")]
    for direction, (queries, query_ids), (gallery, gallery_ids) in [
        ("image_to_text", (images, image_ids), (texts, text_ids)),
        ("text_to_image", (texts, text_ids), (images, image_ids)),
    ]:
        save(tmp_path, "queries", queries, query_ids)
        save(tmp_path, "gallery", gallery, gallery_ids)
        ranks = tmp_path / f"{direction}.parquet"
        extra = ["--direction", direction, "--ranks-out", str(ranks)]
        assert (
            main(
                args_for(
                    tmp_path,
                    "--protocol",
                    "multi_positive",
                    "--direction",
                    "image_to_text",
                    *files,
                    *extra,
                )
            )
            == 0
        )
        table = pl.read_parquet(ranks)
        expected = sorted(judged if direction == "image_to_text" else [(t, i) for i, t in judged])
        assert sorted(table.select("query_id", "item_id").iter_rows()) == expected
        metrics = pl.read_csv(tmp_path / "metrics.csv")
        assert set(metrics["direction"]) == {direction}
    # A label that is no direction cannot say which id is the query.
    assert main(args_for(tmp_path, "--protocol", "multi_positive", *files, "--direction", "x")) == 1
    error = capsys.readouterr().err.strip()
    assert "qrels.parquet" in error and "--direction" in error and "\n" not in error


def fewshot_images(tmp_path, n_per_class=(7, 9, 6)) -> tuple[np.ndarray, list[str]]:
    """Labelled image embeddings (interleaved classes) saved as the query side."""
    rng = np.random.default_rng(6)
    labels = [f"class{c}" for c, n in enumerate(n_per_class) for _ in range(n)]
    order = rng.permutation(len(labels))
    labels = [labels[i] for i in order]
    centres = rng.normal(size=(len(n_per_class), 8))
    vectors = np.asarray([centres[int(label[-1])] for label in labels])
    vectors = (3.0 * vectors + rng.normal(size=vectors.shape)).astype(np.float32)  # not unit
    save(tmp_path, "queries", vectors, [f"img{i}" for i in range(len(labels))], labels)
    return vectors, labels


def test_fewshot_from_image_embeddings_and_labels_without_a_gallery(tmp_path) -> None:
    from vlbench.metrics.fewshot import fewshot_folds
    from vlbench.rank.protocol_ranks import normalise_rows

    vectors, labels = fewshot_images(tmp_path)
    code = main(
        [
            *("score", "--protocol", "zeroshot", "--model", "m", "--benchmark", "b"),
            *("--queries", str(tmp_path / "queries.npy")),
            *("--query-ids", str(tmp_path / "queries.ids.parquet")),
            *("--shots", "1", "5", "--folds", "3", "--out", str(tmp_path / "metrics.csv")),
        ]
    )
    assert code == 0
    rows = pl.read_csv(tmp_path / "metrics.csv")
    assert rows["metric"].to_list() == ["fewshot_accuracy"] * 2
    assert rows["k"].to_list() == [1, 5] and set(rows["direction"]) == {"image_to_image"}
    expected = fewshot_folds(normalise_rows(vectors), labels, [1, 5], 3)
    for row, result in zip(rows.iter_rows(named=True), expected, strict=True):
        assert row["value"] == result.mean * 100
        assert row["fold_std"] == pytest.approx(result.std * 100, rel=1e-12)
        assert row["n_queries"] == 22 - 3 * result.shots and row["n_folds"] == 3
        assert row["ci_low"] <= row["value"] <= row["ci_high"]
    assert rows["n_short_classes"].to_list() == [0, 3]  # 7, 9 and 6 images: below 5 + 5


def test_a_k_larger_than_a_class_is_a_not_computable_row_beside_the_others(tmp_path) -> None:
    fewshot_images(tmp_path)
    code = main(
        [
            *("score", "--protocol", "zeroshot", "--model", "m", "--benchmark", "b"),
            *("--queries", str(tmp_path / "queries.npy")),
            *("--query-ids", str(tmp_path / "queries.ids.parquet")),
            *("--shots", "7", "1", "--folds", "2", "--out", str(tmp_path / "metrics.csv")),
        ]
    )
    assert code == 0
    rows = pl.read_csv(tmp_path / "metrics.csv")
    seven, one = rows.iter_rows(named=True)
    assert seven["k"] == 7 and seven["value"] is None and seven["n_folds"] == 0
    assert seven["not_computable"].startswith(
        "k=7: 1 class(es) with fewer than 7 images: 'class2' (6)"
    )
    assert one["k"] == 1 and one["value"] is not None and one["not_computable"] is None


def test_fewshot_rows_follow_the_zeroshot_rows(tmp_path) -> None:
    _, labels = fewshot_images(tmp_path)
    classes = sorted(set(labels))
    prompts = np.random.default_rng(0).normal(size=(len(classes), 8)).astype(np.float32)
    save(tmp_path, "gallery", prompts, [f"p{i}" for i in range(len(classes))], classes)
    assert main(args_for(tmp_path, "--protocol", "zeroshot", "--shots", "2")) == 0
    rows = pl.read_csv(tmp_path / "metrics.csv")
    assert rows["metric"].to_list() == [
        "zeroshot_top1_accuracy", "zeroshot_top5_accuracy", "balanced_accuracy",
        "fewshot_accuracy",
    ]  # fmt: skip
    assert rows["fold_std"].null_count() == 3


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--protocol", "paired", "--shots", "1"], "--shots: few-shot needs images with classes"),
        (["--protocol", "zeroshot", "--shots", "1", "1"], "k listed twice"),
        (["--protocol", "zeroshot"], "--gallery and --gallery-ids are required"),
    ],
)
def test_fewshot_refusals_are_one_line(tmp_path, capsys, extra, message) -> None:
    fewshot_images(tmp_path)
    args = [
        *("score", "--queries", str(tmp_path / "queries.npy")),
        *("--query-ids", str(tmp_path / "queries.ids.parquet")),
        *("--out", str(tmp_path / "metrics.csv"), *extra),
    ]
    assert main(args) == 1
    error = capsys.readouterr().err.strip()
    assert message in error and "\n" not in error
    assert not (tmp_path / "metrics.csv").exists()


def test_fewshot_needs_a_group_per_image(tmp_path, capsys) -> None:
    save(tmp_path, "queries", np.eye(4, dtype=np.float32), ["a", "b", "c", "d"])
    args = [
        *("score", "--protocol", "zeroshot", "--queries", str(tmp_path / "queries.npy")),
        *("--query-ids", str(tmp_path / "queries.ids.parquet"), "--shots", "1"),
        *("--out", str(tmp_path / "metrics.csv")),
    ]
    assert main(args) == 1
    assert "few-shot (--shots) needs a group for every row" in capsys.readouterr().err


def test_fewshot_option_defaults_are_the_config_schemas() -> None:
    from vlbench.cli import build_parser
    from vlbench.config import validate_config

    config = validate_config(
        {
            "models": {"m": {"name": "x"}},
            "benchmarks": {"b": {"protocol": "zeroshot", "source": {"path": "p"}}},
        },
        "config",
    )
    args = build_parser().parse_args(
        ["score", "--protocol", "zeroshot", "--queries", "q", "--query-ids", "i", "--out", "-"]
    )
    fewshot = config["benchmarks"]["b"]["fewshot"]
    assert (args.folds, args.shuffle) == (fewshot["folds"], fewshot["shuffle"])
    assert args.shots is None  # few-shot only when asked for


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0])
def test_a_nan_or_zero_row_names_the_file_row_and_id(tmp_path, capsys, bad: float) -> None:
    paired_files(tmp_path)
    vectors = np.load(tmp_path / "gallery.npy")
    vectors[3] = bad
    np.save(tmp_path / "gallery.npy", vectors)
    assert main(paired_args(tmp_path)) == 1
    what = "all zeros" if bad == 0 else "NaN or infinite"
    error = capsys.readouterr().err.strip()
    assert error == f"vlbench error: {tmp_path / 'gallery.npy'}: row 3 (id 'x3') is {what}"


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"0.1,0.2\n0.3,0.4\n", "is not a .npy file (it starts with b'0.1,0.'); save one matrix"),
        (b"PK\x03\x04rest", "is not a .npy file (an .npz archive)"),
        ("OBJECT", "holds Python objects (dtype object), not numbers"),
    ],
)
def test_a_file_that_is_no_npy_matrix_says_so(tmp_path, capsys, content, said: str) -> None:
    paired_files(tmp_path)
    queries = tmp_path / "queries.npy"
    if content == "OBJECT":
        np.save(queries, np.array([[1, "a"]], dtype=object), allow_pickle=True)
    else:
        queries.write_bytes(content)
    assert main(paired_args(tmp_path)) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"vlbench error: queries: {queries} {said}"), error
    assert "pickled" not in error


@pytest.mark.parametrize("relevance", [-1, 0.5, None])
def test_a_negative_or_fractional_relevance_is_refused(tmp_path, capsys, relevance) -> None:
    paired_files(tmp_path)
    ids = [f"x{i}" for i in range(6)]
    grades = [1, 1, relevance, 1, 1, 1]
    pl.DataFrame(
        {"query_id": ids, "item_id": ids, "relevance": grades}, strict=False
    ).write_parquet(tmp_path / "qrels.parquet")
    qrels = str(tmp_path / "qrels.parquet")
    assert main(paired_args(tmp_path)) == 1
    error = capsys.readouterr().err.strip()
    shown = {-1: "-1.0", 0.5: "0.5", None: "None"}[relevance]
    assert error == (
        f"vlbench error: {qrels}: row 2: relevance {shown} of query 'x2' and item 'x2' must be "
        "0 (not relevant) or a positive whole grade"
    )
    assert not (tmp_path / "metrics.csv").exists()


@pytest.mark.parametrize("protocol", ["paired", "multi_positive", "taxon_candidates"])
def test_a_protocol_with_two_directions_needs_direction(tmp_path, capsys, protocol) -> None:
    """Text queries must never be labelled image_to_text by default."""
    vectors = np.eye(3, dtype=np.float32)
    save(tmp_path, "queries", vectors, ["t0", "t1", "t2"], ["A", "B", "C"])
    save(tmp_path, "gallery", vectors, ["i0", "i1", "i2"], ["A", "B", "C"])
    assert main(args_for(tmp_path, "--protocol", protocol)) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"vlbench error: --direction is needed for protocol {protocol}")
    assert "\n" not in error
    assert not (tmp_path / "metrics.csv").exists()
