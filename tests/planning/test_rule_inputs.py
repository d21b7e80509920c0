"""The rules' pure input functions name the files each job reads and writes under every cut."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vlbench.metrics.fold_keys import sampler_settings
from vlbench.planning.rule_inputs import (
    EmbedJobs,
    benchmarks_pattern,
    evaluation_inputs,
    example_panels,
    examples_inputs,
    source_input,
)
from vlbench.protocols import Evaluation

MODELS = ["a", "b"]
BENCHMARKS = ["x", "y"]


def wildcards(**values: str) -> SimpleNamespace:
    return SimpleNamespace(**values)


@pytest.mark.parametrize(
    ("jobs", "outputs", "name"),
    [
        ("per_benchmark", ["e/{model}/{benchmark}"], "{model}/{benchmark}"),
        ("per_model", ["e/{model}/x", "e/{model}/y"], "{model}"),
        ("single", ["e/a/x", "e/a/y", "e/b/x", "e/b/y"], "every-model"),
    ],
)
def test_each_cut_names_its_jobs_outputs_timings_and_log(
    jobs: str, outputs: list[str], name: str
) -> None:
    embed = EmbedJobs(jobs, MODELS, BENCHMARKS)
    assert embed.outputs("e/{model}/{benchmark}") == outputs
    assert embed.timings == f"results/timings/embed/{name}.tsv"
    assert embed.log == f"logs/embed/{name}.log"


def test_a_job_covers_its_wildcards_or_every_model_and_benchmark() -> None:
    job = wildcards(model="b", benchmark="y")
    assert EmbedJobs("per_benchmark", MODELS, BENCHMARKS).models_of(job) == ["b"]
    assert EmbedJobs("per_model", MODELS, BENCHMARKS).benchmarks_of(job) == BENCHMARKS
    single = EmbedJobs("single", MODELS, BENCHMARKS)
    assert single.models_of(wildcards()) == MODELS
    assert single.sources("texts")(wildcards()) == [
        "results/data/x/texts.parquet",
        "results/data/y/texts.parquet",
    ]


def test_provenance_lists_one_embed_timing_per_job() -> None:
    timings = EmbedJobs("single", MODELS, BENCHMARKS).benchmark_timings(wildcards(benchmark="x"))
    assert timings.count("results/timings/embed/every-model.tsv") == 1
    assert timings[0] == "results/timings/prepare_benchmark/x.tsv"
    assert "results/timings/evaluate/b/x.tsv" in timings
    per_model = EmbedJobs("per_model", MODELS, BENCHMARKS).benchmark_timings(
        wildcards(benchmark="x")
    )
    assert {"results/timings/embed/a.tsv", "results/timings/embed/b.tsv"} <= set(per_model)


def test_an_evaluation_reads_both_modalities_and_the_prepared_benchmark() -> None:
    inputs = evaluation_inputs(wildcards(model="a", benchmark="x"))
    assert inputs == {
        "image_embeddings": "results/embeddings/a/x/image.npy",
        "image_ids": "results/embeddings/a/x/image.ids.parquet",
        "text_embeddings": "results/embeddings/a/x/text.npy",
        "text_ids": "results/embeddings/a/x/text.ids.parquet",
        "images": "results/data/x/images.parquet",
        "texts": "results/data/x/texts.parquet",
        "qrels": "results/data/x/qrels.parquet",
        "candidates": "results/data/x/candidates.parquet",
        "meta": "results/data/x/benchmark.json",
    }


def test_examples_read_each_panels_query_and_gallery_in_panel_order() -> None:
    panels = example_panels(["a"])
    assert panels == [("a", "image_to_text"), ("a", "text_to_image")]
    inputs = examples_inputs(panels, "x")
    assert inputs["queries"] == [
        "results/embeddings/a/x/image.npy",
        "results/embeddings/a/x/text.npy",
    ]
    assert inputs["index"] == ["results/index/a/x/text.faiss", "results/index/a/x/image.faiss"]
    assert inputs["ranks"][1] == "results/ranks/a/x/text_to_image.parquet"


def test_an_evaluate_rule_matches_only_its_benchmarks() -> None:
    benchmarks = {
        "x.1": {"protocol": "paired", "source": {}},
        "y": {"protocol": "zeroshot", "source": {}},
    }
    assert benchmarks_pattern(
        Evaluation("paired", ("image_to_text", "text_to_image")), benchmarks
    ) == (r"x\.1")


def test_prepare_reads_a_local_folder_or_the_synthetic_source_only(tmp_path) -> None:
    assert source_input("x", {"synthetic": "paired"}) == ["results/sources/x"]
    assert source_input("x", {"path": str(tmp_path)}) == [str(tmp_path)]
    assert source_input("x", {"path": str(tmp_path / "missing")}) == []
    assert source_input("x", {"repo": "org/data"}) == []


def test_folds_depend_only_on_their_sampler_keys() -> None:
    benchmark = {
        "fewshot": {"shots": [1, 5], "folds": 5, "shuffle": "numpy", "batch": 9},
        "probe": {"linear": {"shots": [1], "folds": 3, "validation_proportion": 0.2, "lr": 1}},
    }
    assert sampler_settings(benchmark, "fewshot") == {
        "shots": [1, 5],
        "folds": 5,
        "shuffle": "numpy",
    }
    assert sampler_settings(benchmark, "linear") == {
        "shots": [1],
        "folds": 3,
        "validation_proportion": 0.2,
    }
