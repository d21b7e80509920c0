"""The files the tables stage adds to the workflow's final targets."""

from __future__ import annotations

from collections.abc import Iterable

# Qualitative examples search the whole gallery, which is the protocol only for these.
EXAMPLE_PROTOCOLS = frozenset({"paired", "multi_positive"})
PAPER_TABLE_FORMATS = ("md", "csv", "tex", "html")
BENCHMARK_PLOTS = ("recall_at_k", "model_bars")


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
        f"results/tables/paper/{table}.{extension}"
        for table in paper_tables
        for extension in PAPER_TABLE_FORMATS
    ]
    for benchmark in sorted(benchmarks):
        targets += [
            f"results/tables/{benchmark}.html",
            f"results/provenance/{benchmark}.html",
            *(f"results/plots/{benchmark}/{plot}.png" for plot in BENCHMARK_PLOTS),
        ]
        if example_queries > 0 and benchmarks[benchmark] in EXAMPLE_PROTOCOLS:
            targets += [
                f"results/plots/{benchmark}/examples/{model}/{direction}.png"
                for model in sorted(models)
                for direction in directions
            ]
    return targets
