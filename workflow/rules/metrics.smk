# Stages 4 and 5: exact per-query ranks of every relevant item, then metrics per direction.


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
        qrels="results/data/{benchmark}/qrels.parquet",
    output:
        ranks="results/ranks/{model}/{benchmark}/{direction}.parquet",
    params:
        tie_policy=config["ranking"]["tie_policy"],
        block_mb=config["ranking"]["block_mb"],
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
    params:
        k=lambda wildcards: config["benchmarks"][wildcards.benchmark]["k"],
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/metrics/{model}/{benchmark}/{direction}.log",
    script:
        "../../scripts/metrics.py"
