"""Workflow targets of the ranking and metrics stages, built from a validated config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vlbench.protocols import PROTOCOL_DIRECTIONS


def benchmark_directions(config: Mapping[str, Any], benchmark: str) -> list[str]:
    """The directions a benchmark's protocol evaluates."""
    return list(PROTOCOL_DIRECTIONS[config["benchmarks"][benchmark]["protocol"]])


def metric_files(config: Mapping[str, Any]) -> list[str]:
    """Every per-job metric CSV: each model x benchmark x the benchmark's directions."""
    return [
        f"results/metrics/{model}/{benchmark}/{direction}.csv"
        for model in sorted(config["models"])
        for benchmark in sorted(config["benchmarks"])
        for direction in benchmark_directions(config, benchmark)
    ]


def outcome_files(config: Mapping[str, Any]) -> list[str]:
    """The per-query outcome parquet files behind every metric CSV."""
    return [path.removesuffix(".csv") + ".outcomes.parquet" for path in metric_files(config)]


def metrics_extra_targets(config: Mapping[str, Any]) -> list[str]:
    """Zero-shot per-class tables and, with two or more models, the paired tests."""
    targets = [
        f"results/metrics/{model}/{benchmark}/per_class.csv"
        for model in sorted(config["models"])
        for benchmark in sorted(config["benchmarks"])
        if config["benchmarks"][benchmark]["protocol"] == "zeroshot"
    ]
    return targets + (["results/tables/paired_tests.csv"] if len(config["models"]) > 1 else [])
