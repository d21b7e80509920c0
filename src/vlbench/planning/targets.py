"""Every final target of the workflow, assembled in one place from a validated config."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from vlbench.paths import (
    BENCHMARK_PLOTS,
    CLIP_BENCHMARK_DIR,
    COVERAGE_MD,
    EXAMPLE_PLOT,
    FEWSHOT_METRICS,
    FRONT_PAGE,
    LEADERBOARD,
    METRICS,
    METRICS_CSV,
    METRICS_FULL,
    MTEB_DIR,
    NOT_RUN_CSV,
    PAIRED_TESTS,
    PAPER_TABLE_FILES,
    PER_CLASS,
    PROBE_CLASSIFIERS,
    PROBE_METRICS,
    STANDINGS_CSV,
    TABLES_DIR,
    benchmark_table,
    paper_table_file,
    plot_file,
    provenance_file,
)
from vlbench.protocols import DIRECTIONS, PROTOCOLS
from vlbench.protocols import benchmark_directions as directions_of_benchmark


def benchmark_directions(config: Mapping[str, Any], benchmark: str) -> list[str]:
    """The directions a benchmark evaluates (its protocol's, fixed by its source format)."""
    return list(directions_of_benchmark(config["benchmarks"][benchmark]))


def metric_files(config: Mapping[str, Any]) -> list[str]:
    """Every per-job metric CSV: each model x benchmark x the benchmark's directions."""
    return [
        METRICS.format(model=model, benchmark=benchmark, direction=direction)
        for model in sorted(config["models"])
        for benchmark in sorted(config["benchmarks"])
        for direction in benchmark_directions(config, benchmark)
    ]


def fewshot_metric_files(config: Mapping[str, Any]) -> list[str]:
    """The few-shot metric CSV of every model x benchmark whose protocol has labelled images
    and whose `fewshot.shots` list is not empty (computed from the cached image embeddings)."""
    return [
        FEWSHOT_METRICS.format(model=model, benchmark=benchmark)
        for model in sorted(config["models"])
        for benchmark in sorted(config["benchmarks"])
        if PROTOCOLS[config["benchmarks"][benchmark]["protocol"]].fewshot
        and config["benchmarks"][benchmark]["fewshot"]["shots"]
    ]


def probe_metric_files(config: Mapping[str, Any]) -> list[str]:
    """The probe metric CSV of every model x zero-shot benchmark x classifier whose `shots`
    list is not empty (trained on the cached image embeddings)."""
    return [
        PROBE_METRICS.format(model=model, benchmark=benchmark, classifier=classifier)
        for model in sorted(config["models"])
        for benchmark in sorted(config["benchmarks"])
        if PROTOCOLS[config["benchmarks"][benchmark]["protocol"]].fewshot
        for classifier in PROBE_CLASSIFIERS
        if config["benchmarks"][benchmark]["probe"][classifier]["shots"]
    ]


def outcome_files(config: Mapping[str, Any]) -> list[str]:
    """The per-query outcome parquet files behind every metric CSV."""
    return [path.removesuffix(".csv") + ".outcomes.parquet" for path in metric_files(config)]


def metrics_extra_targets(config: Mapping[str, Any]) -> list[str]:
    """Zero-shot per-class tables and, with two or more models, the paired tests."""
    targets = [
        PER_CLASS.format(model=model, benchmark=benchmark)
        for model in sorted(config["models"])
        for benchmark in sorted(config["benchmarks"])
        if PROTOCOLS[config["benchmarks"][benchmark]["protocol"]].per_class
    ]
    return targets + ([PAIRED_TESTS] if len(config["models"]) > 1 else [])


SUMMARY_TARGETS = (COVERAGE_MD, FRONT_PAGE)


def table_targets(
    paper_tables: Iterable[str],
    benchmarks: dict[str, str],
    models: Iterable[str],
    directions: Iterable[str],
    example_queries: int,
) -> list[str]:
    """Paper tables, per-benchmark HTML tables, plots, provenance and qualitative examples.

    `benchmarks` maps each benchmark key to its protocol.
    """
    targets = [
        paper_table_file(table, name) for table in paper_tables for name in PAPER_TABLE_FILES
    ] + list(SUMMARY_TARGETS)
    for benchmark in sorted(benchmarks):
        targets += [
            benchmark_table(benchmark, "html"),
            provenance_file(benchmark, "html"),
            *(plot_file(benchmark, plot) for plot in BENCHMARK_PLOTS),
        ]
        # Qualitative examples search the whole gallery, which is the protocol only for these.
        if example_queries > 0 and PROTOCOLS[benchmarks[benchmark]].item_retrieval:
            targets += [
                EXAMPLE_PLOT.format(benchmark=benchmark, model=model, direction=direction)
                for model in sorted(models)
                for direction in directions
            ]
    return targets


# Results in other tools' formats (folders) and the leaderboard page.
EXPORT_TARGETS = (MTEB_DIR, CLIP_BENCHMARK_DIR, LEADERBOARD)


def all_targets(config: Mapping[str, Any], paper_tables: Iterable[str]) -> list[str]:
    """`rule all`'s inputs: metrics tables, per-class tables, paired tests, paper tables,
    per-benchmark tables, plots, provenance, examples, the exports and the leaderboard."""
    benchmarks = sorted(config["benchmarks"])
    return (
        [METRICS_CSV, *EXPORT_TARGETS]
        + [benchmark_table(benchmark, "md") for benchmark in benchmarks]
        + metrics_extra_targets(config)
        + table_targets(
            paper_tables,
            {key: config["benchmarks"][key]["protocol"] for key in benchmarks},
            sorted(config["models"]),
            list(DIRECTIONS),
            config["tables"]["qualitative_queries"],
        )
    )


# Outputs of the tables job that no other rule reads as a final target.
TABLES_JOB_EXTRAS = (METRICS_FULL, NOT_RUN_CSV, STANDINGS_CSV)


def table_files(config: Mapping[str, Any], paper_tables: Iterable[str]) -> list[str]:
    """Every file results/tables/ holds after a run of this config (anything else there is an
    earlier config's, vlbench.report.stale_outputs)."""
    targets = all_targets(config, paper_tables)
    return sorted(
        {path for path in targets if path.startswith(f"{TABLES_DIR}/")} | set(TABLES_JOB_EXTRAS)
    )
