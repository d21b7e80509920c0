"""The probe jobs on files: the folds file drawn once and read back, the metric rows over it
(fold values, intervals, chance levels, not-computable ks) and clear errors on bad input."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import scipy.stats

from vlbench.config import benchmark_entry_defaults
from vlbench.errors import VlbenchError
from vlbench.metrics.fewshot_job import score_fewshot, write_fewshot
from vlbench.metrics.folds_job import write_folds
from vlbench.metrics.linear_probe import LinearSettings, linear_probe
from vlbench.metrics.logistic_probe import logistic_probe
from vlbench.metrics.probe_folds import class_indices, draw_folds, folds_from_table
from vlbench.metrics.probe_job import write_probe

LABELS = {"benchmark": "bench", "subset": "test", "model": "m"}
CLASS_SIZES = {"wren": 9, "owl": 6, "crow": 8, "jay": 7, "tit": 6, "finch": 9, "lark": 8}


def labelled(tmp_path: Path, seed: int = 0):
    """An images file (interleaved classes) and matching embeddings stored in another order."""
    rng = np.random.default_rng(seed)
    groups = [name for name, size in CLASS_SIZES.items() for _ in range(size)]
    rng.shuffle(groups)
    ids = [f"img-{row:03d}" for row in range(len(groups))]
    pl.DataFrame({"image_id": ids, "group": groups}).write_parquet(tmp_path / "images.parquet")
    centres = {name: rng.normal(size=12) for name in CLASS_SIZES}
    matrix = np.stack([centres[g] + 1.5 * rng.normal(size=12) for g in groups]).astype(np.float32)
    order = rng.permutation(len(ids))
    return tmp_path / "images.parquet", ids, groups, (matrix[order], np.asarray(ids)[order]), matrix


def settings(classifier: str, **changes) -> dict:
    entry = ("fewshot",) if classifier == "fewshot" else ("probe", classifier)
    return {**benchmark_entry_defaults(*entry), **changes}


@pytest.mark.parametrize("classifier", ["fewshot", "linear", "logistic"])
def test_the_folds_file_reads_back_as_the_drawn_folds(tmp_path: Path, classifier: str) -> None:
    images, ids, groups, _, _ = labelled(tmp_path)
    entry = settings(classifier, shots=[2, 5], folds=3)
    if classifier == "linear":
        entry["validation_proportion"] = 0.2
    write_folds(images, classifier, entry, tmp_path / "folds.parquet")
    table = pl.read_parquet(tmp_path / "folds.parquet")
    assert set(table["classifier"]) == {classifier}
    for read, drawn in zip(
        folds_from_table(table, ids, "folds"), draw_folds(classifier, groups, entry), strict=True
    ):
        assert (read.shots, read.fold) == (drawn.shots, drawn.fold)
        assert read.support.tolist() == drawn.support.tolist()  # in training order
        assert read.validation.tolist() == drawn.validation.tolist()


def test_probe_rows_are_the_fold_results_with_intervals_and_chance(tmp_path: Path) -> None:
    images, ids, groups, embeddings, matrix = labelled(tmp_path)
    features = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    _, targets = class_indices(groups)
    for classifier, entry in (
        ("linear", settings("linear", shots=[3], folds=4, epochs=5)),
        ("logistic", settings("logistic", shots=[3], folds=4)),
    ):
        folds_path = tmp_path / f"{classifier}.parquet"
        write_folds(images, classifier, entry, folds_path)
        out = tmp_path / f"{classifier}.csv"
        write_probe(classifier, embeddings, images, folds_path, entry, LABELS, 0.95, out)
        rows = pl.read_csv(out)
        expected: dict[str, list[float]] = {}
        for item in draw_folds(classifier, groups, entry):
            test = np.setdiff1d(np.arange(len(ids)), item.support)
            args = (features[item.support], targets[item.support], features[test], targets[test])
            if classifier == "linear":
                result = linear_probe(*args, 7, item.fold, LinearSettings(epochs=5))
                scores = {"lp_acc1": result.top1, "lp_acc5": result.top5}
                scores["lp_mean_per_class_recall"] = result.mean_per_class_recall
            else:
                result = logistic_probe(*args)
                scores = {"logreg_accuracy": result.accuracy, "logreg_f1": result.f1}
            for metric, value in scores.items():
                expected.setdefault(metric, []).append(100 * value)
        assert rows["metric"].to_list() == list(expected)
        for row in rows.iter_rows(named=True):
            folds = np.asarray(expected[row["metric"]])
            assert row["value"] == pytest.approx(folds.mean(), abs=1e-9)
            assert [float(v) for v in row["fold_values"].split(";")] == pytest.approx(
                folds, abs=1e-5
            )
            low, high = scipy.stats.t.interval(0.95, 3, folds.mean(), scipy.stats.sem(folds))
            assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high), abs=1e-9)
            assert row["n_queries"] == len(ids) - 3 * 7 and row["n_classes"] == 7
            assert row["direction"] == "image_to_image" and row["k"] == 3
            assert row["chance"] == pytest.approx(
                {"lp_acc5": 500 / 7}.get(row["metric"], 100 / 7)
                if row["metric"] != "logreg_f1"
                else uniform_guess_f1(groups)
            )
        if classifier == "linear":
            assert rows["fold_weight_decays"][0] == "0;0;0;0"  # no validation part: no search
        else:
            assert rows["n_unconverged_folds"][0] == 0


def uniform_guess_f1(groups: list[str]) -> float:
    """Macro F1 (percent) of a guess uniform over classes, by simulation-free counting: each
    class's expected precision is its share, its recall 1 / classes."""
    shares = np.asarray([groups.count(name) for name in CLASS_SIZES]) / len(groups)
    recall = 1 / len(CLASS_SIZES)
    return 100 * float(np.mean([2 * p * recall / (p + recall) for p in shares]))


def test_a_k_beyond_a_class_is_not_computable_and_the_others_still_run(tmp_path: Path) -> None:
    images, _, _, embeddings, _ = labelled(tmp_path)
    entry = settings("linear", shots=[2, 7], folds=2, epochs=2)
    write_folds(images, "linear", entry, tmp_path / "folds.parquet")
    folds, out = tmp_path / "folds.parquet", tmp_path / "out.csv"
    write_probe("linear", embeddings, images, folds, entry, LABELS, 0.95, out)
    rows = pl.read_csv(tmp_path / "out.csv")
    seven = rows.filter(pl.col("k") == 7)
    assert seven["value"].is_null().all()
    assert "'owl' (6)" in seven["not_computable"][0] and "'tit' (6)" in seven["not_computable"][0]
    assert rows.filter(pl.col("k") == 2)["value"].is_not_null().all()


def test_an_image_without_a_class_and_a_stale_folds_file_fail_naming_them(tmp_path: Path) -> None:
    images, ids, groups, embeddings, _ = labelled(tmp_path)
    entry = settings("logistic", shots=[2], folds=1)
    write_folds(images, "logistic", entry, tmp_path / "folds.parquet")
    trained = pl.read_parquet(tmp_path / "folds.parquet")["image_id"][0]
    left = [(item, group) for item, group in zip(ids, groups, strict=True) if item != trained]
    pl.DataFrame(left, schema=["image_id", "group"], orient="row").write_parquet(
        tmp_path / "fewer.parquet"
    )
    kept = embeddings[1] != trained
    with pytest.raises(VlbenchError, match=f"image '{trained}' of k=2 fold 0 .*rerun the folds"):
        write_probe(
            "logistic", (embeddings[0][kept], embeddings[1][kept]), tmp_path / "fewer.parquet",
            tmp_path / "folds.parquet", entry, LABELS, 0.95, tmp_path / "out.csv",
        )  # fmt: skip
    unlabelled = tmp_path / "unlabelled.parquet"
    pl.DataFrame({"image_id": ids, "group": [None, *groups[1:]]}).write_parquet(unlabelled)
    with pytest.raises(VlbenchError, match=f"image '{ids[0]}' has no class"):
        write_folds(unlabelled, "logistic", entry, tmp_path / "other.parquet")
    assert not (tmp_path / "other.parquet").exists()


def test_the_fewshot_job_over_its_folds_file_equals_the_evaluation_drawing_its_own(
    tmp_path: Path,
) -> None:
    """The few-shot job reads its supports from the benchmark's folds file (k = 7 is beyond two
    classes: not computable, in the file too); a file of other folds is refused."""
    images, _, groups, embeddings, matrix = labelled(tmp_path)
    entry = settings("fewshot", shots=[1, 7, 3], folds=4)
    write_folds(images, "fewshot", entry, tmp_path / "folds.parquet")
    out = tmp_path / "fewshot.csv"
    write_fewshot(embeddings, images, tmp_path / "folds.parquet", entry, LABELS, 0.95, out)
    expected = score_fewshot(matrix, groups, entry, LABELS, 0.95)
    assert pl.read_csv(out).equals(pl.read_csv(io.StringIO(expected.write_csv())))
    assert "'owl' (6)" in pl.read_csv(out).filter(pl.col("k") == 7)["not_computable"][0]
    other = {**entry, "folds": 5}
    with pytest.raises(VlbenchError, match=r"not those of the few-shot entry .*rerun the folds"):
        write_fewshot(embeddings, images, tmp_path / "folds.parquet", other, LABELS, 0.95, out)


def test_a_k_that_leaves_nothing_to_test_is_not_computable_and_trains_nothing(
    tmp_path: Path,
) -> None:
    """mteb's sampler gives a class of k images or fewer all of them: at k = 9 no image of
    this benchmark is left to test (its largest class has 9)."""
    images, _, _, embeddings, _ = labelled(tmp_path)
    entry = settings("logistic", shots=[9, 2], folds=2)
    folds, out = tmp_path / "folds.parquet", tmp_path / "out.csv"
    write_folds(images, "logistic", entry, folds)
    write_probe("logistic", embeddings, images, folds, entry, LABELS, 0.95, out)
    rows = pl.read_csv(out)
    nine = rows.filter(pl.col("k") == 9)
    assert nine["value"].is_null().all() and nine["n_short_classes"].to_list() == [7, 7]
    assert "leaves no image to test" in nine["not_computable"][0]
    assert rows.filter(pl.col("k") == 2)["value"].is_not_null().all()
