# Stages 3-5: per (model, benchmark) one job builds the faiss index of each gallery, ranks every
# direction of the benchmark exactly and computes its metrics (and, for zero-shot, the per-class
# table); then few-shot accuracy and the paired tests between models.
# Protocols differ in their directions, so each protocol in use (and BioVITA's text-to-image
# format, which evaluates the other direction of its protocol) has its own rule,
# evaluate_<protocol>[_<direction>], declaring its files (vlbench.paths.evaluation_outputs): the
# faiss index of each gallery, and per direction the ranks, the metric rows and the per-query
# outcomes (vlbench.paths INDEX, RANKS, METRICS, OUTCOMES).

from vlbench.config import pick, result_keys
from vlbench.metrics.fold_keys import sampler_settings
from vlbench.paths import (
    BENCHMARK_META,
    EMBEDDING_FILES,
    EVALUATE_TIMINGS,
    FEWSHOT_METRICS,
    FEWSHOT_TIMINGS,
    FOLDS,
    PAIRED_TESTS,
    PREPARED_FILES,
    PROBE_METRICS,
    PROBE_TIMINGS,
    evaluation_outputs,
)
from vlbench.planning.rule_inputs import benchmarks_pattern, evaluation_inputs
from vlbench.protocols import evaluations, protocol as protocol_record


for _evaluation in evaluations(config["benchmarks"]):

    rule:
        name:
            _evaluation.rule
        input:
            unpack(evaluation_inputs),
        output:
            **evaluation_outputs(protocol_record(_evaluation.protocol), _evaluation.directions),
        wildcard_constraints:
            benchmark=benchmarks_pattern(_evaluation, config["benchmarks"]),
        params:
            protocol=lambda wildcards: config["benchmarks"][wildcards.benchmark]["protocol"],
            directions=list(_evaluation.directions),
            k=lambda wildcards: config["benchmarks"][wildcards.benchmark]["k"],
            ranking=result_keys(config, "ranking"),
            stats=pick(config["metrics"], "confidence", "bootstrap_samples", "seed"),
        resources:
            mem_mb=lambda wildcards: config["ranking"]["block_mb"] + 1024,
        conda:
            "../../envs/vlbench.yaml"
        log:
            "logs/evaluate/{model}/{benchmark}.log",
        benchmark:
            EVALUATE_TIMINGS
        script:
            "../../scripts/evaluate.py"


# Few-shot classification (BioCLIP's protocol) of a zero-shot benchmark, from the image
# embeddings its zero-shot ranking already reads (no embedding job of its own), over the
# benchmark's few-shot folds.
rule fewshot:
    input:
        embeddings=EMBEDDING_FILES["image"],
        ids=EMBEDDING_FILES["image_ids"],
        images=PREPARED_FILES["images"],
        meta=BENCHMARK_META,
        folds=FOLDS.replace("{classifier}", "fewshot"),
    output:
        metrics=FEWSHOT_METRICS,
    params:
        fewshot=lambda wildcards: config["benchmarks"][wildcards.benchmark]["fewshot"],
        confidence=config["metrics"]["confidence"],
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/fewshot/{model}/{benchmark}.log",
    benchmark:
        FEWSHOT_TIMINGS
    script:
        "../../scripts/fewshot.py"


# Which images train each fold of a classifier of a zero-shot benchmark (the few-shot
# evaluation, or a probe: docs/probes.md), drawn once per benchmark and classifier with its
# reference's sampler (the benchmark's `fewshot` or `probe.<classifier>` entry), shared by every
# model and written down so that anyone can rerun a fold.
rule folds:
    input:
        images=PREPARED_FILES["images"],
    output:
        folds=FOLDS,
    params:
        sampler=lambda wildcards: sampler_settings(
            config["benchmarks"][wildcards.benchmark], wildcards.classifier
        ),
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/folds/{benchmark}/{classifier}.log",
    script:
        "../../scripts/folds.py"


rule probe:
    input:
        embeddings=EMBEDDING_FILES["image"],
        ids=EMBEDDING_FILES["image_ids"],
        images=PREPARED_FILES["images"],
        meta=BENCHMARK_META,
        folds=FOLDS,
    output:
        metrics=PROBE_METRICS,
    params:
        settings=lambda wildcards: config["benchmarks"][wildcards.benchmark]["probe"][
            wildcards.classifier
        ],
        confidence=config["metrics"]["confidence"],
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/probe/{model}/{benchmark}/{classifier}.log",
    benchmark:
        PROBE_TIMINGS
    script:
        "../../scripts/probe.py"


rule paired_tests:
    input:
        outcomes=PLAN.outcome_files,
    output:
        csv=PAIRED_TESTS,
    params:
        stats=pick(config["metrics"], "confidence", "permutation_samples", "seed"),
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/paired_tests/paired_tests.log",
    script:
        "../../scripts/paired_tests.py"
