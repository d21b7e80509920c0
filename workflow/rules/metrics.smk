# Stages 4 and 5: exact per-query ranks of every relevant item, then metrics per direction,
# the zero-shot per-class table and paired tests between models.

from vlbench.targets import metric_files, outcome_files


rule rank:
    input:
        queries=lambda wildcards: "results/embeddings/{model}/{benchmark}/%s.npy"
        % query_and_gallery(wildcards)[0],
        query_ids=lambda wildcards: "results/embeddings/{model}/{benchmark}/%s.ids.parquet"
        % query_and_gallery(wildcards)[0],
        index=lambda wildcards: "results/index/{model}/{benchmark}/%s.faiss"
        % query_and_gallery(wildcards)[1],
        gallery_ids=lambda wildcards: "results/embeddings/{model}/{benchmark}/%s.ids.parquet"
        % query_and_gallery(wildcards)[1],
        images="results/data/{benchmark}/images.parquet",
        texts="results/data/{benchmark}/texts.parquet",
        qrels="results/data/{benchmark}/qrels.parquet",
        candidates="results/data/{benchmark}/candidates.parquet",
    output:
        ranks="results/ranks/{model}/{benchmark}/{direction}.parquet",
    params:
        protocol=lambda wildcards: config["benchmarks"][wildcards.benchmark]["protocol"],
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
        protocol=lambda wildcards: config["benchmarks"][wildcards.benchmark]["protocol"],
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


rule paired_tests:
    input:
        outcomes=outcome_files(config),
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
