# Stages 3-5: per (model, benchmark) one job builds the faiss index of each gallery, ranks every
# direction of the benchmark's protocol exactly and computes its metrics (and, for zero-shot,
# the per-class table); then the paired tests between models.
# Protocols differ in their directions, so each protocol in use has its own rule,
# evaluate_<protocol>, declaring that protocol's files (vlbench.paths.evaluation_outputs):
# results/index/{model}/{benchmark}/<gallery>.faiss, and per direction
# results/ranks/{model}/{benchmark}/<direction>.parquet and
# results/metrics/{model}/{benchmark}/<direction>.csv (+ .outcomes.parquet).
for _protocol in EVALUATED_PROTOCOLS:

    rule:
        name:
            f"evaluate_{_protocol}"
        input:
            unpack(evaluation_inputs),
        output:
            **evaluation_outputs(_protocol),
        wildcard_constraints:
            benchmark=benchmarks_pattern(_protocol),
        params:
            protocol=benchmark_protocol,
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
            "results/timings/evaluate/{model}/{benchmark}.tsv"
        script:
            "../../scripts/evaluate.py"


rule paired_tests:
    input:
        outcomes=OUTCOME_FILES,
    output:
        csv="results/tables/paired_tests.csv",
    params:
        stats=pick(config["metrics"], "confidence", "permutation_samples", "seed"),
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/paired_tests/paired_tests.log",
    script:
        "../../scripts/paired_tests.py"
