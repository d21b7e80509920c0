"""The rules' input functions that need no Snakemake object: pure functions of a job's
wildcards and the plan's lists, every path taken from `vlbench.paths`.

`workflow/rules/common.smk` keeps the ones that read the run's config (pins resolved on first
use) or the workflow; these only name files.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlbench.config import EMBED_JOB_WILDCARDS, source_kind
from vlbench.paths import (
    BENCHMARK_META,
    EMBEDDING_FILES,
    EVALUATE_TIMINGS,
    GATHER_TIMINGS,
    INDEX,
    PREPARE_TIMINGS,
    PREPARED_FILES,
    RANKS,
    TIMINGS_DIR,
    synthetic_source,
)
from vlbench.protocols import DIRECTIONS, Evaluation, evaluation_of

# The prepared files an evaluation (or examples) job reads, by input name.
PREPARED_INPUTS = ("images", "texts", "qrels", "candidates")


def _fill(pattern: str, **wildcards: str) -> str:
    """A path pattern with some of its wildcards filled in (the others kept)."""
    for name, value in wildcards.items():
        pattern = pattern.replace(f"{{{name}}}", value)
    return pattern


def prepared_data(wildcards: Any) -> dict[str, str]:
    """The canonical files of a prepared benchmark (used with `unpack`)."""
    return {
        name: _fill(PREPARED_FILES[name], benchmark=wildcards.benchmark) for name in PREPARED_INPUTS
    }


def evaluation_inputs(wildcards: Any) -> dict[str, str]:
    """What an evaluation job reads: both modalities' embeddings and the prepared benchmark."""
    pair = {"model": wildcards.model, "benchmark": wildcards.benchmark}
    embeddings = {
        f"{modality}_{kind}": _fill(EMBEDDING_FILES[f"{modality}{suffix}"], **pair)
        for modality in ("image", "text")
        for kind, suffix in (("embeddings", ""), ("ids", "_ids"))
    }
    meta = _fill(BENCHMARK_META, benchmark=wildcards.benchmark)
    return {**embeddings, **prepared_data(wildcards), "meta": meta}


def benchmarks_pattern(evaluation: Evaluation, benchmarks: Mapping[str, Mapping[str, Any]]) -> str:
    """The benchmark wildcard's pattern for one evaluate rule: the benchmarks it evaluates."""
    return "|".join(
        re.escape(key) for key in sorted(benchmarks) if evaluation_of(benchmarks[key]) == evaluation
    )


def direction_files(model: str, benchmark: str, direction: str) -> dict[str, str]:
    """A direction's query matrix and ids, and its gallery index and ids."""
    query, gallery = DIRECTIONS[direction]
    pair = {"model": model, "benchmark": benchmark}
    return {
        "queries": _fill(EMBEDDING_FILES[query], **pair),
        "query_ids": _fill(EMBEDDING_FILES[f"{query}_ids"], **pair),
        "index": _fill(INDEX, modality=gallery, **pair),
        "gallery_ids": _fill(EMBEDDING_FILES[f"{gallery}_ids"], **pair),
    }


def example_panels(models: Sequence[str]) -> list[tuple[str, str]]:
    """The panels the examples job of a benchmark draws: one per (model, direction)."""
    return [(model, direction) for model in models for direction in DIRECTIONS]


def examples_inputs(panels: Sequence[tuple[str, str]], benchmark: str) -> dict[str, list[str]]:
    """Every panel's direction files and ranks, as lists in panel order (`unpack`)."""
    inputs: dict[str, list[str]] = {
        "queries": [],
        "query_ids": [],
        "index": [],
        "gallery_ids": [],
        "ranks": [],
    }
    for model, direction in panels:
        for key, path in direction_files(model, benchmark, direction).items():
            inputs[key].append(path)
        inputs["ranks"].append(_fill(RANKS, model=model, benchmark=benchmark, direction=direction))
    return inputs


@dataclass(frozen=True)
class EmbedJobs:
    """The embed rule's jobs under one cut (`embedding.jobs`, resolved): the wildcards each job
    has (`vlbench.config.EMBED_JOB_WILDCARDS`), the models and benchmarks it covers, in the
    order of its outputs, and its `benchmark:` and log files."""

    jobs: str
    models: Sequence[str]
    benchmarks: Sequence[str]

    @property
    def wildcards(self) -> tuple[str, ...]:
        return EMBED_JOB_WILDCARDS[self.jobs]

    def outputs(self, pattern: str) -> list[str]:
        """A (model, benchmark) path pattern as one embed job names it (several paths): the
        job's wildcards stay, the others are filled with every model or benchmark."""
        models = ["{model}"] if "model" in self.wildcards else self.models
        benchmarks = ["{benchmark}"] if "benchmark" in self.wildcards else self.benchmarks
        return [
            _fill(pattern, model=model, benchmark=benchmark)
            for model in models
            for benchmark in benchmarks
        ]

    def models_of(self, wildcards: Any) -> list[str]:
        """The models of one embed job, in the order of its outputs."""
        return [wildcards.model] if "model" in self.wildcards else list(self.models)

    def benchmarks_of(self, wildcards: Any) -> list[str]:
        """The benchmarks of one embed job, in the order of its outputs."""
        return [wildcards.benchmark] if "benchmark" in self.wildcards else list(self.benchmarks)

    def sources(self, modality: str) -> Callable[[Any], list[str]]:
        """Input function: the prepared parquet files of one modality ("images", "texts") an
        embed job reads."""
        return lambda wildcards: [
            _fill(PREPARED_FILES[modality], benchmark=benchmark)
            for benchmark in self.benchmarks_of(wildcards)
        ]

    @property
    def name(self) -> str:
        """A job's name in its `benchmark:` and log file paths: its wildcards."""
        if not self.wildcards:
            return "every-model"
        return str(Path(*(f"{{{name}}}" for name in self.wildcards)))

    @property
    def timings(self) -> str:
        return f"{TIMINGS_DIR}/embed/{self.name}.tsv"

    @property
    def log(self) -> str:
        return f"logs/embed/{self.name}.log"

    def benchmark_timings(self, wildcards: Any) -> list[str]:
        """The `benchmark:` files of the jobs on one benchmark (prepare, every embed, gather
        and evaluate), which its provenance page lists."""
        benchmark = wildcards.benchmark
        files = [_fill(PREPARE_TIMINGS, benchmark=benchmark)]
        for model in self.models:
            for pattern in (self.timings, GATHER_TIMINGS, EVALUATE_TIMINGS):
                files.append(_fill(pattern, model=model, benchmark=benchmark))
        return list(dict.fromkeys(files))  # one embed job may cover every model


def source_input(benchmark: str, source: Mapping[str, Any]) -> list[str]:
    """What the prepare job of a benchmark reads locally: the synthetic source folder the
    workflow writes, or the local folder of a `path` source; nothing for a hub source."""
    kind = source_kind(source)
    if kind == "synthetic":
        return [synthetic_source(benchmark)]
    if kind == "path" and Path(source["path"]).is_dir():
        return [source["path"]]
    return []
