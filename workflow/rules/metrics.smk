# Stages 4 and 5: exact per-query ranks of every relevant item, then metrics per direction,
# the zero-shot per-class table, few-shot accuracy and paired tests between models.


rule rank:
    input:
        unpack(direction_embeddings),
        unpack(prepared_data),
    output:
        ranks="results/ranks/{model}/{benchmark}/{direction}.parquet",
    params:
        protocol=benchmark_protocol,
        ranking=result_keys(config, "ranking"),
    resources:
        mem_mb=lambda wildcards: config["ranking"]["block_mb"] + 1024,
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/rank/{model}/{benchmark}/{direction}.log",
    benchmark:
        "results/timings/rank/{model}/{benchmark}/{direction}.tsv"
    script:
        "../../scripts/rank.py"


rule metrics:
    input:
        ranks="results/ranks/{model}/{benchmark}/{direction}.parquet",
        meta="results/data/{benchmark}/benchmark.json",
    output:
        metrics="results/metrics/{model}/{benchmark}/{direction}.csv",
        outcomes="results/metrics/{model}/{benchmark}/{direction}.outcomes.parquet",
    params:
        protocol=benchmark_protocol,
        k=lambda wildcards: config["benchmarks"][wildcards.benchmark]["k"],
        tie_policy=config["ranking"]["tie_policy"],
        stats=pick(config["metrics"], "confidence", "bootstrap_samples", "seed"),
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/metrics/{model}/{benchmark}/{direction}.log",
    script:
        "../../scripts/metrics.py"


rule per_class:
    input:
        ranks="results/ranks/{model}/{benchmark}/image_to_text.parquet",
        meta="results/data/{benchmark}/benchmark.json",
    output:
        per_class="results/metrics/{model}/{benchmark}/per_class.csv",
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/per_class/{model}/{benchmark}.log",
    script:
        "../../scripts/per_class.py"


# Few-shot classification (BioCLIP's protocol) of a zero-shot benchmark, from the image
# embeddings its zero-shot ranking already reads: no embedding job of its own.
rule fewshot:
    input:
        embeddings="results/embeddings/{model}/{benchmark}/image.npy",
        ids="results/embeddings/{model}/{benchmark}/image.ids.parquet",
        images="results/data/{benchmark}/images.parquet",
        meta="results/data/{benchmark}/benchmark.json",
    output:
        metrics="results/metrics/{model}/{benchmark}/fewshot.csv",
    params:
        fewshot=lambda wildcards: config["benchmarks"][wildcards.benchmark]["fewshot"],
        confidence=config["metrics"]["confidence"],
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/fewshot/{model}/{benchmark}.log",
    benchmark:
        "results/timings/fewshot/{model}/{benchmark}.tsv"
    script:
        "../../scripts/fewshot.py"


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
