# Stage 6: the long metrics table and one Markdown table per benchmark.


rule tables:
    input:
        metrics=expand(
            "results/metrics/{model}/{benchmark}/{direction}.csv",
            model=MODELS,
            benchmark=BENCHMARKS,
            direction=list(DIRECTIONS),
        ),
    output:
        csv="results/tables/metrics.csv",
        markdown=expand("results/tables/{benchmark}.md", benchmark=BENCHMARKS),
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/tables/tables.log",
    script:
        "../../scripts/tables.py"
