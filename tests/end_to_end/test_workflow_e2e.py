"""The whole DAG on the shared demo run: exact numbers, nothing redone, only new work scheduled."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats
from workflow_helpers import (
    copy_of_run,
    run_workflow,
    shared_demo,
    snakemake_command,
    synthetic_benchmark,
    tiny_model,
    watch_processes,
    write_config,
)

CONTRACT = [
    "benchmark",
    "subset",
    "model",
    "direction",
    "metric",
    "k",
    "value",
    "ci_low",
    "ci_high",
    "n_queries",
]
KS = [1, 5, 10]


def brute_force_recall(queries: np.ndarray, gallery: np.ndarray, k: int) -> np.ndarray:
    """Hit vector of 1-to-1 pairs: query i's relevant item is gallery i; ties in index order."""
    scores = queries.astype(np.float64) @ gallery.astype(np.float64).T
    order = np.argsort(-scores, axis=1, kind="stable")
    return np.array([i in order[i, :k] for i in range(len(queries))], dtype=float)


def notebook_interval(hits: np.ndarray) -> tuple[float, float]:
    """mean -/+ t(0.975, n-1) * s / sqrt(n), written out by hand."""
    n = len(hits)
    half = stats.t.ppf(0.975, n - 1) * hits.std(ddof=1) / np.sqrt(n)
    return hits.mean() - half, hits.mean() + half


def test_metrics_table_has_the_contract(demo_run: Path) -> None:
    table = pl.read_csv(demo_run / "results" / "tables" / "metrics.csv")
    assert table.columns == CONTRACT
    recall = table.filter(pl.col("metric") == "recall")
    assert recall.height == 2 * len(KS)
    assert set(table["direction"]) == {"image_to_text", "text_to_image"}
    assert {"recall", "mrr", "mean_rank", "median_rank"} <= set(table["metric"])
    assert table["n_queries"].to_list() == [40] * table.height
    assert set(table["subset"]) == {"test"}
    markdown = (demo_run / "results" / "tables" / "demo.md").read_text()
    assert "chance" in markdown and "tiny" in markdown


def test_values_equal_an_independent_computation(demo_run: Path) -> None:
    embeddings = demo_run / "results" / "embeddings" / "tiny" / "demo"
    images = np.load(embeddings / "image.npy", allow_pickle=False)
    texts = np.load(embeddings / "text.npy", allow_pickle=False)
    assert images.dtype == np.float32 and images.shape == (40, 64)
    np.testing.assert_allclose(np.linalg.norm(images, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(texts, axis=1), 1.0, rtol=1e-5)
    table = pl.read_csv(demo_run / "results" / "tables" / "metrics.csv")
    table = table.filter(pl.col("metric") == "recall")
    for direction, queries, gallery in (
        ("image_to_text", images, texts),
        ("text_to_image", texts, images),
    ):
        for k in KS:
            hits = brute_force_recall(queries, gallery, k)
            row = table.filter((pl.col("direction") == direction) & (pl.col("k") == k)).row(
                0, named=True
            )
            assert row["value"] == pytest.approx(100 * hits.mean(), abs=1e-9)
            if hits.std() > 0:
                low, high = notebook_interval(hits)
                assert row["ci_low"] == pytest.approx(100 * low, abs=1e-9)
                assert row["ci_high"] == pytest.approx(100 * high, abs=1e-9)
            else:
                assert row["ci_low"] == row["ci_high"] == pytest.approx(row["value"])


def test_second_run_has_nothing_to_do(demo_run: Path) -> None:
    result = run_workflow(demo_run, demo_run / "config.yaml", "--dry-run")
    assert "Nothing to be done" in result.stdout + result.stderr


def test_a_local_run_selects_jobs_once_per_finished_job(demo_run: Path, tmp_path: Path) -> None:
    """Without Snakemake's default job rate limiter, whose timers add a wake-up a second for
    every finished job, the scheduler looks at the ready jobs once per job that ends
    (vlbench.planning.invocation.drop_default_rate_limit)."""
    run = copy_of_run(demo_run, tmp_path)
    result = run_workflow(run, run / "config.yaml", "--forcerun", "prepare_benchmark", "--verbose")
    output = result.stdout + result.stderr
    finished = len(re.findall(r"^Finished jobid", output, re.MULTILINE))
    rounds = len(re.findall(r"Ready jobs", output))
    assert finished >= 10 and rounds <= finished, (finished, rounds)


def test_no_process_outlives_the_run(demo_run: Path) -> None:
    """The shared demo run and its report ran as children of a child subreaper (see
    `workflow_helpers.watch_processes`): no process they started, a job, a decode worker or a
    detached daemon, was alive once Snakemake had exited."""
    for name in ("run", "report"):
        leftovers = demo_run.parent / f"demo-run.{name}.leftovers.json"
        assert json.loads(leftovers.read_text(encoding="utf-8")) == [], name


def test_the_process_watch_sees_a_detached_daemon(tmp_path: Path) -> None:
    """What the check above would see: a process that detaches into a session of its own."""
    daemon = "import subprocess; subprocess.Popen(['sleep', '300'], start_new_session=True)"
    leftovers = tmp_path / "leftovers.json"
    result = watch_processes([sys.executable, "-c", daemon], leftovers, tmp_path)
    assert result.returncode == 0, result.stderr
    assert [process["command"] for process in json.loads(leftovers.read_text())] == ["sleep 300"]


def jobs_in_dry_run(output: str) -> list[tuple[str, dict[str, str]]]:
    """(rule, wildcards) of every job a dry run lists."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", output):
        match = re.match(r"(?:local)?rule (\w+):", block.strip())
        if not match:
            continue
        wildcards = re.search(r"wildcards: (.*)", block)
        pairs = (
            dict(item.split("=", 1) for item in wildcards.group(1).split(", ")) if wildcards else {}
        )
        jobs.append((match.group(1), pairs))
    return jobs


def test_adding_a_model_schedules_only_that_models_jobs(demo_run: Path, tmp_path: Path) -> None:
    config = shared_demo()
    config["models"]["tiny2"] = tiny_model(seed=1)
    # Written elsewhere, this config names the run's paper map by its full path (a relative one
    # would be relative to the config's own folder).
    config["tables"]["map"] = str(demo_run / config["tables"]["map"])
    result = run_workflow(demo_run, write_config(tmp_path, config), "--dry-run")
    jobs = jobs_in_dry_run(result.stdout)
    rules = {rule for rule, _ in jobs}
    assert any(rule.startswith("embed") for rule in rules)
    models = {wildcards["model"] for _, wildcards in jobs if "model" in wildcards}
    assert models == {"tiny2"}
    shared = {rule for rule, wildcards in jobs if "model" not in wildcards}
    assert not shared & {"write_synthetic_source", "prepare_benchmark", "init_random_checkpoint"}
    assert "tables" in shared


def test_configfile_replaces_the_default_experiment(demo_run: Path) -> None:
    """The default config's model and benchmark never leak into a user's config."""
    result = run_workflow(demo_run, demo_run / "config.yaml", "--dry-run", "--forceall")
    assert "tiny-random" not in result.stdout
    assert "synthetic-biomedflickr" not in result.stdout


def test_typo_in_config_is_one_clear_line(workdir: Path) -> None:
    model = tiny_model() | {"precison": "fp32"}
    config = {"models": {"tiny": model}, "benchmarks": {"demo": synthetic_benchmark(10)}}
    result = run_workflow(workdir, write_config(workdir, config), "--dry-run", check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "unknown key 'precison' at 'models.tiny'" in output
    assert "Traceback" not in output
    # The cause is the error's first line, and the only one (no Snakemake frame after it).
    errors = [line for line in output.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("vlbench error: ")
    assert "common.smk" not in output


def test_a_model_key_given_twice_is_one_clear_line(workdir: Path) -> None:
    config = write_config(
        workdir, {"models": {"tiny": tiny_model()}, "benchmarks": {"demo": synthetic_benchmark(10)}}
    )
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("benchmarks:", "  tiny:\n    name: other\nbenchmarks:"))
    result = run_workflow(workdir, config, "--dry-run", check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "key 'tiny' is given twice (first at line 2)" in output
    assert "Traceback" not in output


def test_missing_local_source_fails_naming_key_and_path(workdir: Path) -> None:
    benchmark = {"protocol": "paired", "source": {"path": "no/such/dir"}, "k": [1]}
    config = {"models": {"tiny": tiny_model()}, "benchmarks": {"local": benchmark}}
    result = run_workflow(workdir, write_config(workdir, config), check=False)
    assert result.returncode != 0
    message = (
        "nothing to run: every benchmark misses its local data: benchmark local: "
        "benchmarks.local.source.path: directory not found: no/such/dir"
    )
    assert message in result.stdout + result.stderr
    assert not (workdir / "logs").exists()  # refused at plan time: no job ran


def test_a_missing_model_file_is_refused_at_plan_time_not_in_a_job(workdir: Path) -> None:
    model = tiny_model() | {"model_config": "models/absent.json"}
    config = {"models": {"tiny": model}, "benchmarks": {"demo": synthetic_benchmark(10)}}
    result = run_workflow(workdir, write_config(workdir, config), check=False)
    assert result.returncode != 0
    assert (
        "nothing to run: every model misses its local data: model tiny: "
        "models.tiny.model_config: file not found: models/absent.json"
    ) in result.stdout + result.stderr
    assert not (workdir / "logs").exists()


def test_switching_configs_leaves_only_the_current_configs_tables(
    demo_run: Path, tmp_path: Path
) -> None:
    """The shared demo's run, then another config in the same directory: results/tables/ lists
    exactly the new config's files (the demo's moved to results/stale/), not_run.csv names the
    benchmark left out for missing data, and the run's last lines say so."""
    run = copy_of_run(demo_run, tmp_path)
    other = {
        "models": {"tiny": tiny_model()},
        "benchmarks": {
            "other": synthetic_benchmark(12, seed=3, k=[1, 5]),
            "gone": {"protocol": "paired", "source": {"path": "{data_root}/gone"}},
        },
        "tables": {"qualitative_queries": 0},
    }
    result = run_workflow(run, write_config(run, other, "other.yaml"), "--cores", "2")
    tables = run / "results" / "tables"
    listed = sorted(str(path.relative_to(tables)) for path in tables.rglob("*") if path.is_file())
    # No benchmark of the new config maps into a paper table: coverage.md says so.
    assert listed == [
        "coverage.md",
        "front_page.rst",
        "metrics.csv",
        "metrics_full.csv",
        "not_run.csv",
        "other.html",
        "other.md",
        "standings.csv",
    ]
    stale = run / "results" / "stale"
    assert (stale / "tables" / "demo.md").read_bytes() == (
        demo_run / "results" / "tables" / "demo.md"
    ).read_bytes()
    assert {path.name for path in (stale / "tables" / "paper").iterdir()} == {
        f"biomedflickr.{extension}"
        for extension in ("md", "csv", "tex", "html", "rst", "coverage.json")
    }
    assert (stale / "plots" / "demo" / "recall_at_k.png").is_file()
    assert not (run / "results" / "plots" / "demo").exists()
    assert sorted(path.name for path in (run / "results" / "provenance").iterdir()) == [
        "other.csv",
        "other.html",
    ]
    assert set(pl.read_csv(tables / "metrics.csv")["benchmark"]) == {"other"}
    not_run = pl.read_csv(tables / "not_run.csv").to_dicts()
    assert not_run == [
        {
            "kind": "benchmark",
            "key": "gone",
            "reason": "missing data",
            "detail": "benchmarks.gone.source.path: directory not found: data/gone "
            "(needs the hub repository's layout: data/<split>-*.parquet)",
        }
    ]
    last_lines = (result.stdout + result.stderr).strip().splitlines()[-6:]
    assert (
        "vlbench: not run: benchmark gone (missing data); see results/tables/not_run.csv"
        in last_lines
    ), last_lines


def test_source_parquet_without_expected_columns_names_the_file(workdir: Path) -> None:
    data = workdir / "mine" / "data"
    data.mkdir(parents=True)
    bad = data / "test-00000-of-00001.parquet"
    pq.write_table(pa.table({"image": [{"bytes": b"x", "path": "a.jpg"}], "text": ["hello"]}), bad)
    benchmark = {"protocol": "paired", "source": {"path": "mine"}, "k": [1]}
    config = {"models": {"tiny": tiny_model()}, "benchmarks": {"local": benchmark}}
    result = run_workflow(workdir, write_config(workdir, config), check=False)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "mine/data/test-00000-of-00001.parquet: missing column(s) caption" in output
    log = (workdir / "logs" / "prepare_benchmark" / "local.log").read_text()
    assert "missing column(s) caption" in log
    shutil.rmtree(workdir / "mine")


def test_fp16_without_a_gpu_is_refused_before_any_job_naming_the_key(workdir: Path) -> None:
    config = {
        "models": {"half": tiny_model() | {"precision": "fp16"}},
        "benchmarks": {"demo": synthetic_benchmark(10)},
    }
    configfile = write_config(workdir, config)
    planned = run_workflow(workdir, configfile, "--dry-run", check=False)
    assert planned.returncode == 0, planned.stderr  # a plan runs nothing: it may be for a GPU node
    hidden = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU for this run, on any machine
    command = snakemake_command(workdir, configfile=configfile, cores=1)
    refused = subprocess.run(command, cwd=workdir, capture_output=True, text=True, env=hidden)
    assert refused.returncode == 1
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("vlbench error: models.half.precision: fp16 needs a GPU and this run's")
    assert not (workdir / "results").exists()  # no job ran


def test_results_merge_into_clip_benchmark_and_rank_the_model(
    demo_run: Path, tmp_path: Path
) -> None:
    """clip_benchmark's own `build` reads the run's result files with our recall values; the one
    model is first with the interval [1, 1] and, alone in its columns, is not printed bold."""
    from clip_benchmark.cli import main_build

    out = tmp_path / "benchmark.csv"
    main_build(
        SimpleNamespace(files=[str(demo_run / "results" / "clip_benchmark")], output=str(out))
    )
    (row,) = list(csv.DictReader(out.open()))
    metrics = pl.read_csv(demo_run / "results" / "tables" / "metrics.csv")
    recalls = metrics.filter(pl.col("metric") == "recall")
    names = {"text_to_image": "image_retrieval", "image_to_text": "text_retrieval"}
    assert row["dataset"] == metrics["benchmark"][0] and row["task"] == "zeroshot_retrieval"
    for metric in recalls.iter_rows(named=True):
        name = f"{names[metric['direction']]}_recall@{metric['k']}"
        assert float(row[name]) == pytest.approx(metric["value"] / 100)
    standings = pl.read_csv(demo_run / "results" / "tables" / "standings.csv")
    assert standings.height and set(standings["rank"]) == {1} == set(standings["rank_high"])
    assert standings["tied_with_best"].all()
    table = (demo_run / "results" / "tables" / f"{row['dataset']}.md").read_text()
    assert "**" not in table.split("| model")[1]
