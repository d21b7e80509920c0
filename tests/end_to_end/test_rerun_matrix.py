"""The rerun matrix: after a finished run, each edit schedules exactly the jobs that depend on it.

One finished run (two models, two local benchmarks, a paper table) is copied for every edit; the
edit is applied to the copy and the jobs of Snakemake's dry run are compared with the set the
DAG says must rerun. Which embedding shards a rerunning embedding job really embeds again (its
stored shards are reused by content key) is checked by a real run.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from rerun_matrix_support import (
    CHECKPOINT,
    MODEL_A,
    MODEL_B,
    REFERENCE_CSV,
    REFERENCE_MAP,
    edited_copies,
    finished_run,
    jobs_in_log,
    planned,
    scheduled_jobs,
)
from workflow_helpers import copy_of_run, run_workflow

from vlbench.embedding.models import write_random_checkpoint

MODELS = ("local", "tiny")
BENCHMARKS = ("birds", "pairs")
PAIRS_PARQUET = "data/pairs/data/test-00000-of-00001.parquet"
OLD_MTIME_NS = 946_684_800 * 10**9  # 2000-01-01: older than every output


def job(rule: str, **wildcards: str) -> str:
    """A job as `scheduled_jobs` writes it."""
    if not wildcards:
        return rule
    return f"{rule}[{','.join(f'{k}={v}' for k, v in sorted(wildcards.items()))}]"


# The paper table, and the coverage summary and the leaderboard page after it.
PAPER = {job("paper_table", table="biomedflickr"), job("paper_summary"), job("leaderboard")}
# The results in other tools' formats.
EXPORTS = {job("export_results")}


def summary(benchmarks=BENCHMARKS, paired_tests: bool = True) -> set[str]:
    """The jobs that read the long metrics table (and the paired tests)."""
    jobs = {job("tables"), *PAPER, *EXPORTS}
    jobs |= {job("paired_tests")} if paired_tests else set()
    for benchmark in benchmarks:
        jobs |= {
            job("benchmark_table", benchmark=benchmark),
            job("plot_benchmark", benchmark=benchmark),
            job("provenance", benchmark=benchmark),
        }
    return jobs


def from_evaluation(models=MODELS, benchmarks=BENCHMARKS) -> set[str]:
    """Evaluation jobs (indexes, ranks and metrics of every direction) and everything after."""
    jobs = {job("evaluate_paired", model=m, benchmark=b) for m in models for b in benchmarks}
    return jobs | summary()


# The embed job that covers a (model, benchmark) under each cut (embedding.jobs).
EMBED_JOB = {
    "single": lambda model, benchmark: job("embed"),
    "per_model": lambda model, benchmark: job("embed", model=model),
    "per_benchmark": lambda model, benchmark: job("embed", model=model, benchmark=benchmark),
}


def from_embeddings(
    models=MODELS, benchmarks=BENCHMARKS, cut: str = "single", identity: bool = True
) -> set[str]:
    """The embed jobs that cover these pairs under `cut`, each pair's gather and evaluation,
    and everything after them: never another pair's gather or evaluation. `identity`: the
    models' identities changed (their identity files are written again)."""
    pairs = [(model, benchmark) for model in models for benchmark in benchmarks]
    jobs = {EMBED_JOB[cut](*pair) for pair in pairs}
    jobs |= {job("gather_embeddings", model=m, benchmark=b) for m, b in pairs}
    if identity:
        jobs |= {job("embedding_identity", model=model) for model in models}
    return jobs | from_evaluation(models, benchmarks)


def from_prepare(benchmark: str, cut: str = "single") -> set[str]:
    """A benchmark re-prepared, and every model's jobs on it."""
    return {job("prepare_benchmark", benchmark=benchmark)} | from_embeddings(
        benchmarks=(benchmark,), cut=cut, identity=False
    )


def replanned(cut: str, removed: str) -> set[str]:
    """The embed jobs whose set of pairs shrinks when a model or a benchmark is removed: they
    run once more, reusing every stored shard and loading no model."""
    if cut == "single":
        return {job("embed")}
    if cut == "per_model" and removed == "benchmark":
        return {job("embed", model=model) for model in MODELS}
    return set()


# --- edits ------------------------------------------------------------------------------------


def edit_config(workdir: Path, change: Callable[[dict], None]) -> None:
    path = workdir / "config.yaml"
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    change(config)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")


def edited_caption_table(workdir: Path) -> pa.Table:
    table = pq.read_table(workdir / PAIRS_PARQUET)
    captions = table.column("caption").to_pylist()
    captions[3] = captions[3] + " (edited)"
    return table.set_column(table.schema.get_field_index("caption"), "caption", pa.array(captions))


def caption_in_place(workdir: Path) -> None:
    table = edited_caption_table(workdir)
    with open(workdir / PAIRS_PARQUET, "r+b") as handle:  # same inode, as an editor in place
        handle.truncate(0)
        pq.write_table(table, handle)


def caption_write_then_rename(workdir: Path) -> None:
    tmp = workdir / "data" / "pairs" / "data" / "edit.tmp"
    pq.write_table(edited_caption_table(workdir), tmp)
    os.replace(tmp, workdir / PAIRS_PARQUET)


def annotation_csv_in_place(workdir: Path) -> None:
    path = workdir / "data" / "birds" / "annotations.csv"
    text = path.read_text(encoding="utf-8").replace("on a branch", "on a twig", 1)
    path.write_text(text, encoding="utf-8")


def image_replaced(workdir: Path) -> None:
    images = workdir / "data" / "birds" / "images"
    data = (images / "7001.jpg").read_bytes()
    (images / "7000.jpg").unlink()
    (images / "7000.jpg").write_bytes(data)


def model_config_edited(path: str) -> Callable[[Path], None]:
    def edit(workdir: Path) -> None:
        config = json.loads((workdir / path).read_text(encoding="utf-8"))
        config["quick_gelu"] = True
        (workdir / path).write_text(json.dumps(config), encoding="utf-8")

    return edit


def checkpoint_replaced_by_older_copy(workdir: Path) -> None:
    other = workdir / "other.pt"
    write_random_checkpoint("vlbench-tiny", workdir / MODEL_B, 11, other)
    os.utime(other, ns=(OLD_MTIME_NS, OLD_MTIME_NS))
    os.replace(other, workdir / CHECKPOINT)


def reference_csv_edited_keeping_mtime(workdir: Path) -> None:
    path = workdir / REFERENCE_CSV
    stat = path.stat()
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    value = rows[0].index("value")
    rows[1][value] = str(float(rows[1][value]) + 1.25)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def reference_map_edited(workdir: Path) -> None:
    path = workdir / REFERENCE_MAP
    path.write_text(path.read_text(encoding="utf-8") + "# a comment\n", encoding="utf-8")


def set_key(*keys: str, value) -> Callable[[Path], None]:
    def change(config: dict) -> None:
        section = config
        for key in keys[:-1]:
            section = section.setdefault(key, {})
        section[keys[-1]] = value

    return lambda workdir: edit_config(workdir, change)


def add_model(workdir: Path) -> None:
    edit_config(
        workdir,
        lambda c: c["models"].update(
            extra={"name": "vlbench-tiny", "model_config": MODEL_A, "random_init_seed": 5}
        ),
    )


def remove_model(workdir: Path) -> None:
    edit_config(workdir, lambda c: c["models"].pop("local"))


def add_benchmark(workdir: Path) -> None:
    shutil.copytree(workdir / "data" / "pairs", workdir / "data" / "more")
    edit_config(
        workdir,
        lambda c: c["benchmarks"].update(
            more={"protocol": "paired", "source": {"path": "data/more"}, "k": [1]}
        ),
    )


def remove_benchmark(workdir: Path) -> None:
    edit_config(workdir, lambda c: c["benchmarks"].pop("birds"))


def matrix(cut: str) -> dict[str, tuple[Callable[[Path], None], set[str]]]:
    """Every edit and the jobs it must schedule, under an embedding cut."""
    model_tiny = {job("init_random_checkpoint", model="tiny")} | from_embeddings(("tiny",), cut=cut)
    extra_model = {job("init_random_checkpoint", model="extra")} | from_embeddings(
        ("extra",), cut=cut
    )
    return {
        "nothing changed": (lambda workdir: None, set()),
        "caption edited in place": (caption_in_place, from_prepare("pairs", cut)),
        "caption edited, written then renamed": (
            caption_write_then_rename,
            from_prepare("pairs", cut),
        ),
        "annotation CSV rewritten in place": (annotation_csv_in_place, from_prepare("birds", cut)),
        "image file replaced": (image_replaced, from_prepare("birds", cut)),
        "model_config of a random-init model edited": (model_config_edited(MODEL_A), model_tiny),
        "model_config of a local checkpoint edited": (
            model_config_edited(MODEL_B),
            from_embeddings(("local",), cut=cut),
        ),
        "local checkpoint replaced by an older file": (
            checkpoint_replaced_by_older_copy,
            from_embeddings(("local",), cut=cut),
        ),
        "reference CSV edited, mtime kept": (
            reference_csv_edited_keeping_mtime,
            PAPER,
        ),
        "reference map edited": (reference_map_edited, PAPER),
        "embedding.num_workers": (set_key("embedding", "num_workers", value=1), set()),
        "embedding.threads": (set_key("embedding", "threads", value=1), set()),
        "prepare.threads": (set_key("prepare", "threads", value=1), set()),
        "embedding.pixel_cache": (set_key("embedding", "pixel_cache", value=False), set()),
        "ranking.block_mb": (set_key("ranking", "block_mb", value=64), set()),
        "embedding.batch_size": (
            set_key("embedding", "batch_size", value=8),
            from_embeddings(cut=cut),
        ),
        "embedding.shard_size": (
            set_key("embedding", "shard_size", value=10),
            from_embeddings(cut=cut),
        ),
        "embedding.storage_dtype": (
            set_key("embedding", "storage_dtype", value="float16"),
            from_embeddings(cut=cut),
        ),
        "ranking.tie_policy": (
            set_key("ranking", "tie_policy", value="optimistic"),
            from_evaluation(),
        ),
        "metrics.bootstrap_samples": (
            set_key("metrics", "bootstrap_samples", value=30),
            from_evaluation(),
        ),
        "metrics.permutation_samples": (
            set_key("metrics", "permutation_samples", value=60),
            summary(),  # the paired tests, and the standings of the tables job
        ),
        "metrics.notebook_columns": (
            set_key("metrics", "notebook_columns", value=True),
            summary() - {job("paired_tests")},
        ),
        "tables.tolerance": (
            set_key("tables", "tolerance", value=1.0),
            PAPER,
        ),
        "tables.qualitative_queries": (
            set_key("tables", "qualitative_queries", value=1),
            {job("qualitative_examples", benchmark=b) for b in BENCHMARKS},
        ),
        "benchmarks.birds.k": (
            set_key("benchmarks", "birds", "k", value=[1, 10]),
            from_evaluation(benchmarks=("birds",)),
        ),
        "benchmarks.pairs.prompt_prefix": (
            set_key("benchmarks", "pairs", "prompt_prefix", value="a photo of "),
            from_prepare("pairs", cut),
        ),
        "benchmarks.birds.decode": (
            set_key("benchmarks", "birds", "decode", value={"exif": True}),
            from_prepare("birds", cut),
        ),
        "a model added": (add_model, extra_model | summary()),
        "a model removed": (
            remove_model,
            replanned(cut, "model") | summary(paired_tests=False),
        ),
        "a benchmark added": (
            add_benchmark,
            from_prepare("more", cut) | summary(("birds", "more", "pairs")),
        ),
        "a benchmark removed": (
            remove_benchmark,
            replanned(cut, "benchmark") | summary(("pairs",)),
        ),
    }


MATRIX = matrix("single")  # auto's cut on one machine, the finished run's
# Edits checked again under the cluster's cut (one embed job per model and benchmark).
PER_BENCHMARK_EDITS = (
    "nothing changed",
    "caption edited in place",
    "model_config of a random-init model edited",
    "a model added",
)


@pytest.fixture(scope="module")
def matrix_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished run, under umask 022 (the results' modes are checked below)."""
    previous = os.umask(0o022)
    try:
        return finished_run(tmp_path_factory.mktemp("rerun-matrix") / "run")
    finally:
        os.umask(previous)


# Edits after which the one embed job reruns (its set of pairs shrinks) while jobs after it
# must rerun for reasons of their own (the tables list one model or benchmark fewer). A dry run
# cannot list those: Snakemake weighs no reason of a job downstream of one that reruns, and the
# gathers read the embed job's lists as `ancient`. The embed rule is a checkpoint, so the run
# plans again once it has finished and runs them: checked by running, not by a dry run.
PLANNED_AGAIN_AFTER_EMBED = ("a model removed", "a benchmark removed")


@pytest.fixture(scope="module")
def edited_runs(
    matrix_run: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """Each edit of the matrix on its own copy of the finished run, and the copy's dry run."""
    edits = {edit: apply for edit, (apply, _) in MATRIX.items()}
    return edited_copies(matrix_run, edits, tmp_path_factory.mktemp("edited"))


@pytest.mark.parametrize("edit", list(MATRIX))
def test_an_edit_schedules_exactly_its_dependent_jobs(
    edit: str, edited_runs: dict[str, tuple[Path, subprocess.CompletedProcess]]
) -> None:
    expected = MATRIX[edit][1]
    workdir, dry_run = edited_runs[edit]
    jobs = planned(dry_run)
    if edit not in PLANNED_AGAIN_AFTER_EMBED:
        assert jobs == expected
        return
    assert job("embed") in jobs and jobs < expected
    result = run_workflow(workdir, workdir / "config.yaml", "--cores", "2")
    assert jobs_in_log(result.stderr) == expected
    assert scheduled_jobs(workdir) == set()


@pytest.fixture(scope="module")
def per_benchmark_run(matrix_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The finished run switched to one embed job per (model, benchmark): the switch runs the
    new embed jobs alone (they reuse every stored shard) and leaves every gathered matrix and
    evaluation as it was."""
    workdir = copy_of_run(matrix_run, tmp_path_factory.mktemp("per-benchmark"))
    set_key("embedding", "jobs", value="per_benchmark")(workdir)
    gathered = {path: path.stat().st_mtime_ns for path in workdir.glob("results/*/*/*/*.*")}
    result = run_workflow(workdir, workdir / "config.yaml", "--cores", "2")
    # The new embed jobs, and the provenance pages that list their timings.
    assert jobs_in_log(result.stderr) == {
        EMBED_JOB["per_benchmark"](m, b) for m in MODELS for b in BENCHMARKS
    } | {job("provenance", benchmark=b) for b in BENCHMARKS}
    assert all(
        path.stat().st_mtime_ns == mtime
        for path, mtime in gathered.items()
        if "/shards" not in str(path)
    )
    return workdir


@pytest.fixture(scope="module")
def edited_per_benchmark_runs(
    per_benchmark_run: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """The cluster cut's edits, each on its own copy of the switched run, and its dry run."""
    edits = {edit: matrix("per_benchmark")[edit][0] for edit in PER_BENCHMARK_EDITS}
    return edited_copies(per_benchmark_run, edits, tmp_path_factory.mktemp("edited-cut"))


@pytest.mark.parametrize("edit", PER_BENCHMARK_EDITS)
def test_an_edit_schedules_exactly_its_dependent_jobs_under_the_cluster_cut(
    edit: str, edited_per_benchmark_runs: dict[str, tuple[Path, subprocess.CompletedProcess]]
) -> None:
    assert planned(edited_per_benchmark_runs[edit][1]) == matrix("per_benchmark")[edit][1]


def test_an_edited_caption_re_embeds_the_texts_and_keeps_the_image_shards(
    matrix_run: Path, tmp_path: Path
) -> None:
    """The embedding job reruns (its text rows changed) but reuses its stored image shard: only
    the text shards are embedded again; the image matrix is gathered again, byte-identical."""
    workdir = copy_of_run(matrix_run, tmp_path)
    embeddings = workdir / "results" / "embeddings"
    before = {path: path.stat().st_mtime_ns for path in embeddings.rglob("shard-*.npy")}
    images = {path: path.read_bytes() for path in embeddings.rglob("image.npy")}
    caption_in_place(workdir)
    run_workflow(workdir, workdir / "config.yaml", "--cores", "2")
    changed = {
        str(path.relative_to(embeddings))
        for path, mtime_ns in before.items()
        if path.stat().st_mtime_ns != mtime_ns
    }
    assert changed == {f"{model}/pairs/shards/text/shard-00000.npy" for model in MODELS}
    assert all(path.read_bytes() == content for path, content in images.items())
    for model in MODELS:
        for modality, reused in (("image", True), ("text", False)):
            record = json.loads((embeddings / model / "pairs" / f"{modality}.json").read_text())
            assert [shard["reused"] for shard in record["shards"]] == [reused], modality
    assert scheduled_jobs(workdir) == set()


def test_results_honour_the_umask_and_the_provenance_names_the_device(matrix_run: Path) -> None:
    results = matrix_run / "results"
    for path in ("tables/metrics.csv", "tables/paper/biomedflickr.md", "data/pairs/images.parquet"):
        assert (results / path).stat().st_mode & 0o777 == 0o644, path
    provenance = (results / "provenance" / "pairs.csv").read_text(encoding="utf-8").splitlines()
    header = provenance[0].split(",")
    for row in provenance[1:]:
        values = dict(zip(header, row.split(","), strict=False))
        assert values["device"] == "cpu" and values["host"], row


def test_a_model_added_leaves_every_other_models_files_untouched(
    matrix_run: Path, tmp_path: Path
) -> None:
    """Under the one embed job for every model, a new model is embedded, gathered and evaluated;
    every other model's matrices, indexes, ranks and metrics keep their bytes and times, and
    their lists of stored shards their bytes (Snakemake touches every output of a job it ran)."""
    workdir = copy_of_run(matrix_run, tmp_path)
    kept = {
        path: (path.stat().st_mtime_ns, path.read_bytes())
        for stage in ("embeddings", "index", "ranks", "metrics")
        for model in MODELS
        for path in (workdir / "results" / stage / model).rglob("*")
        if path.is_file()
        and path.name != "shards.json"
        and "shards" not in path.relative_to(workdir / "results").parts
    }
    lists = {path: path.read_bytes() for path in workdir.glob("results/embeddings/*/*/shards.json")}
    add_model(workdir)
    result = run_workflow(workdir, workdir / "config.yaml", "--cores", "2")
    ran = jobs_in_log(result.stderr)
    assert {job("embed"), job("gather_embeddings", model="extra", benchmark="pairs")} <= ran
    assert not any(f"model={model}" in name for name in ran for model in MODELS)
    assert len(kept) > 20 and len(lists) == len(MODELS) * len(BENCHMARKS)
    for path, (mtime, content) in kept.items():
        assert (path.stat().st_mtime_ns, path.read_bytes()) == (mtime, content), path
    for path, content in lists.items():
        assert path.read_bytes() == content, path
