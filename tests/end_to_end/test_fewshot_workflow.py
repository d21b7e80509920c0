"""Few-shot accuracy and the probe classifiers in the workflow: a zero-shot run makes the
few-shot table from the image embeddings it already has (no embedding job of its own), adding
k = 10 to a finished run reruns only the few-shot metrics and the tables after them, and
switching the probes on runs only their folds and probe jobs."""

from __future__ import annotations

import csv
import random
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
import yaml
from fixtures_sources import write_rare_species_repo
from rerun_matrix_support import jobs_in_log, scheduled_jobs
from workflow_helpers import copy_of_run, run_workflow, tiny_model, write_config

from vlbench.config import benchmark_entry_defaults
from vlbench.embedding.matrix_files import load_embeddings
from vlbench.metrics.fewshot import class_members, fewshot_folds, fold_splits
from vlbench.metrics.linear_probe import LinearSettings, linear_probe
from vlbench.metrics.logistic_probe import logistic_probe
from vlbench.metrics.probe_folds import class_indices, draw_folds
from vlbench.rank.protocol_ranks import normalise_rows

BENCHMARK, MODEL = "rare-species", "tiny"
# Images per class of the fixture (the fixture's four species, in its order): uneven, and at
# least 10 each so that k = 10 runs (the class of exactly 10 then has no query).
CLASS_SIZES = (12, 10, 11, 12)
TARGETS = ("results/tables/metrics.csv", "results/tables/paper/bioclip-fewshot.md")
FEWSHOT_CSV = f"results/metrics/{MODEL}/{BENCHMARK}/fewshot.csv"


def job(rule: str, **wildcards: str) -> str:
    """A job as `jobs_in_log` writes it."""
    if not wildcards:
        return rule
    return f"{rule}[{','.join(f'{k}={v}' for k, v in sorted(wildcards.items()))}]"


def write_uneven_rare_species(root: Path) -> list[str]:
    """The Rare Species layout with CLASS_SIZES images per class, its CSV rows in a shuffled
    order (classes interleaved); returns the file names in CSV order."""
    write_rare_species_repo(root, per_class=max(CLASS_SIZES))
    path = root / "metadata.csv"
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header, rows = next(reader), list(reader)
    per_class: dict[str, list[list[str]]] = {}
    for row in rows:
        per_class.setdefault(row[-2], []).append(row)  # keyed by species epithet
    groups = zip(CLASS_SIZES, per_class.values(), strict=True)
    kept = [row for size, group in groups for row in group[:size]]
    random.Random(0).shuffle(kept)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([header, *kept])
    return [row[0] for row in kept]


def zeroshot_config(root: Path) -> dict:
    """A zero-shot benchmark as config/biocap.yaml configures Rare Species (few-shot left at its
    defaults), on the fixture and the tiny random model."""
    return {
        "models": {MODEL: tiny_model()},
        "benchmarks": {
            BENCHMARK: {
                "protocol": "zeroshot",
                "text_type": "taxon_com",
                "source": {"path": str(root), "columns": {"file": "file_name", "common": "common"}},
                "k": [1, 5],
            }
        },
        "metrics": {"bootstrap_samples": 20},
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str], list[str]]:
    """One zero-shot run up to the metrics table and the few-shot paper table: the workdir, the
    jobs it ran, and the fixture's file names in CSV order."""
    workdir = tmp_path_factory.mktemp("fewshot")
    files = write_uneven_rare_species(workdir / "sources" / "rare")
    configfile = write_config(workdir, zeroshot_config(workdir / "sources" / "rare"))
    result = run_workflow(workdir, configfile, *TARGETS, "--cores", "2")
    return workdir, jobs_in_log(result.stdout + "\n" + result.stderr), files


SUMMARY = {job("tables"), job("paper_table", table="bioclip-fewshot")}
FEWSHOT_JOB = job("fewshot", model=MODEL, benchmark=BENCHMARK)
FEWSHOT_FOLDS_JOB = job("folds", benchmark=BENCHMARK, classifier="fewshot")


def test_a_zeroshot_run_makes_the_fewshot_table_with_no_embedding_job_of_its_own(
    finished,
) -> None:
    workdir, ran, _ = finished
    on_benchmark = {"benchmark": BENCHMARK}
    zeroshot_jobs = {
        job("prepare_benchmark", **on_benchmark),
        job("init_random_checkpoint", model=MODEL),
        job("embed"),  # auto on one machine: one embed job for every model
        job("embedding_identity", model=MODEL),
        job("gather_embeddings", model=MODEL, **on_benchmark),
        job("evaluate_zeroshot", model=MODEL, **on_benchmark),
    }
    # Everything a zero-shot evaluation runs anyway, plus the one few-shot job.
    assert ran == zeroshot_jobs | {FEWSHOT_FOLDS_JOB, FEWSHOT_JOB} | SUMMARY
    table = (workdir / TARGETS[1]).read_text(encoding="utf-8")
    assert "| Rare Species zero-shot | Rare Species one-shot | Rare Species five-shot |" in table
    assert "| BioCLIP (published) | – / 38.09 / – | – / 44.9 / – | – / 65.7 / – |" in table
    ours = next(line for line in table.splitlines() if line.startswith(f"| {MODEL} |"))
    assert ours.count(" / – / – |") == 3  # ours in all three columns, no published value
    metrics = pl.read_csv(workdir / TARGETS[0])
    fewshot = metrics.filter(pl.col("metric") == "fewshot_accuracy")
    assert fewshot["k"].to_list() == [1, 5]
    assert set(fewshot["direction"]) == {"image_to_image"}


def test_fewshot_rows_are_the_reference_procedure_on_the_cached_embeddings(finished) -> None:
    """The job reads the gathered image matrix in the source's row order: the prepared images
    file keeps the annotation CSV's order, which is the order BioCLIP's loader reads."""
    workdir, _, files = finished
    images = pq.read_table(workdir / f"results/data/{BENCHMARK}/images.parquet")
    assert images.column("image_id").to_pylist() == files
    stem = workdir / f"results/embeddings/{MODEL}/{BENCHMARK}/image"
    matrix, ids = load_embeddings(f"{stem}.npy", f"{stem}.ids.parquet")
    position = {item: row for row, item in enumerate(ids.tolist())}
    vectors = matrix[[position[item] for item in files]]
    expected = fewshot_folds(normalise_rows(vectors), images.column("group").to_pylist(), [1, 5], 5)
    rows = pl.read_csv(workdir / FEWSHOT_CSV)
    for row, result in zip(rows.iter_rows(named=True), expected, strict=True):
        assert row["k"] == result.shots and row["value"] == result.mean * 100
        folds = [float(value) for value in row["fold_values"].split(";")]
        assert folds == pytest.approx([100 * a for a in result.fold_accuracies], abs=1e-6)
        assert row["n_queries"] == sum(CLASS_SIZES) - 4 * result.shots
        assert row["n_short_classes"] == 0  # every class has at least k + 5 images


def test_the_fewshot_folds_are_written_down_as_bioclip_draws_them(finished) -> None:
    """Every fold's support images (class-major, in the order the reference stacks them) in
    results/folds/, so anyone can rerun a fold of the few-shot numbers."""
    workdir, _, files = finished
    groups = pq.read_table(workdir / f"results/data/{BENCHMARK}/images.parquet")["group"]
    folds = pl.read_parquet(workdir / f"results/folds/{BENCHMARK}/fewshot.parquet")
    _, members = class_members(groups.to_pylist())
    expected = list(fold_splits(members, [1, 5], 5))
    assert folds.select("k", "fold").unique().height == len(expected) == 10
    for k, fold, support, _, _ in expected:
        written = folds.filter((pl.col("k") == k) & (pl.col("fold") == fold)).sort("order")
        assert set(written["role"]) == {"support"}
        assert written["image_id"].to_list() == [files[row] for row in support]


def test_adding_k10_reruns_only_the_fewshot_metrics_and_tables(finished, tmp_path: Path) -> None:
    workdir = copy_of_run(finished[0], tmp_path)
    path = workdir / "config.yaml"
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    config["benchmarks"][BENCHMARK]["fewshot"] = {"shots": [1, 5, 10]}
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    before = pl.read_csv(workdir / FEWSHOT_CSV)
    rerun = {FEWSHOT_FOLDS_JOB, FEWSHOT_JOB} | SUMMARY
    assert scheduled_jobs(workdir, *TARGETS) == rerun
    result = run_workflow(workdir, path, *TARGETS, "--cores", "2")
    assert jobs_in_log(result.stdout + "\n" + result.stderr) == rerun
    after = pl.read_csv(workdir / FEWSHOT_CSV)
    # Appended at the end of the k list: k = 1 and 5 keep their folds.
    assert (
        after.filter(pl.col("k") < 10)
        .drop("n_short_classes")
        .equals(before.drop("n_short_classes"))
    )
    ten = after.filter(pl.col("k") == 10).row(0, named=True)
    assert ten["n_queries"] == sum(CLASS_SIZES) - 40
    assert ten["n_short_classes"] == 4  # every class has fewer than 15 images: flagged
    assert np.isfinite(ten["value"])


PROBE_DEFAULTS = {name: benchmark_entry_defaults("probe", name) for name in ("linear", "logistic")}
PROBES = {
    "linear": {"shots": [2], "folds": 2, "validation_proportion": 0.25, "epochs": 3},
    "logistic": {"shots": [4, 11], "folds": 3},
}


def probe_job(rule: str, classifier: str, with_model: bool = True) -> str:
    wildcards = {"benchmark": BENCHMARK, "classifier": classifier}
    return job(rule, **wildcards, **({"model": MODEL} if with_model else {}))


def with_probes(workdir: Path, probes: dict) -> Path:
    path = workdir / "config.yaml"
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    config["benchmarks"][BENCHMARK]["probe"] = probes
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def probed(finished, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    """The finished zero-shot run with both probe classifiers switched on, run again."""
    workdir = copy_of_run(finished[0], tmp_path_factory.mktemp("probed"))
    path = with_probes(workdir, PROBES)
    result = run_workflow(workdir, path, TARGETS[0], "--cores", "2")
    return workdir, jobs_in_log(result.stdout + "\n" + result.stderr)


def test_switching_probes_on_runs_only_their_jobs_and_the_tables(probed) -> None:
    _, ran = probed
    assert ran == {
        probe_job("folds", "linear", with_model=False),
        probe_job("folds", "logistic", with_model=False),
        probe_job("probe", "linear"),
        probe_job("probe", "logistic"),
        job("tables"),
    }


def test_probe_rows_are_the_classifiers_on_the_cached_embeddings_over_the_folds_file(
    probed,
) -> None:
    """Each fold's support in the folds file is what the reference's sampler draws from the
    prepared classes; every row's fold values are the classifier retrained on those images."""
    workdir, _ = probed
    images = pq.read_table(workdir / f"results/data/{BENCHMARK}/images.parquet")
    ids, groups = images.column("image_id").to_pylist(), images.column("group").to_pylist()
    stem = workdir / f"results/embeddings/{MODEL}/{BENCHMARK}/image"
    matrix, matrix_ids = load_embeddings(f"{stem}.npy", f"{stem}.ids.parquet")
    position = {item: row for row, item in enumerate(matrix_ids.tolist())}
    features = normalise_rows(matrix[[position[item] for item in ids]])
    _, targets = class_indices(groups)
    metrics = pl.read_csv(workdir / TARGETS[0])
    for classifier, settings in PROBES.items():
        folds = pl.read_parquet(workdir / f"results/folds/{BENCHMARK}/{classifier}.parquet")
        drawn = draw_folds(classifier, groups, {**PROBE_DEFAULTS[classifier], **settings})
        for item in drawn:
            support = folds.filter(
                (pl.col("k") == item.shots)
                & (pl.col("fold") == item.fold)
                & (pl.col("role") == "support")
            ).sort("order")
            assert support["image_id"].to_list() == [ids[p] for p in item.support]
        for k in settings["shots"]:
            expected = []
            for item in (item for item in drawn if item.shots == k):
                test = np.setdiff1d(np.arange(len(ids)), np.r_[item.support, item.validation])
                if classifier == "linear":
                    training = np.setdiff1d(np.arange(len(ids)), item.validation)
                    result = linear_probe(
                        features[item.support],
                        targets[item.support],
                        features[test],
                        targets[test],
                        int(targets[training].max()) + 1,
                        item.fold,
                        LinearSettings(epochs=3),
                        (features[item.validation], targets[item.validation]),
                    )
                    expected.append(
                        {
                            "lp_acc1": result.top1,
                            "lp_mean_per_class_recall": result.mean_per_class_recall,
                        }
                    )
                else:
                    result = logistic_probe(
                        features[item.support], targets[item.support], features[test], targets[test]
                    )
                    expected.append({"logreg_accuracy": result.accuracy, "logreg_f1": result.f1})
            for metric in expected[0]:
                row = metrics.filter((pl.col("metric") == metric) & (pl.col("k") == k)).row(
                    0, named=True
                )
                assert row["direction"] == "image_to_image" and row["model"] == MODEL
                assert row["value"] == pytest.approx(
                    100 * np.mean([e[metric] for e in expected]), abs=1e-9
                )
    # Four classes: no top-5 in clip_benchmark; k = 11 leaves the classes of 10 and 11 nothing
    # to test (mteb trains on all of them), which the row counts.
    full = pl.read_csv(workdir / "results/tables/metrics_full.csv")
    top5 = full.filter(pl.col("metric") == "lp_acc5")
    assert top5["value"].is_null().all() and "below 5" in top5["not_computable"][0]
    eleven = full.filter((pl.col("metric") == "logreg_accuracy") & (pl.col("k") == 11)).row(
        0, named=True
    )
    assert eleven["n_short_classes"] == 2 and eleven["n_queries"] == 1 + 1


def test_a_training_key_reruns_only_its_classifier_and_a_sampler_key_its_folds(
    probed, tmp_path: Path
) -> None:
    workdir = copy_of_run(probed[0], tmp_path)
    with_probes(workdir, {**PROBES, "logistic": {**PROBES["logistic"], "max_iter": 50}})
    assert scheduled_jobs(workdir, TARGETS[0]) == {probe_job("probe", "logistic"), job("tables")}
    with_probes(workdir, {**PROBES, "linear": {**PROBES["linear"], "folds": 3}})
    assert scheduled_jobs(workdir, TARGETS[0]) == {
        probe_job("folds", "linear", with_model=False),
        probe_job("probe", "linear"),
        job("tables"),
    }
