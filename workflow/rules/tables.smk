# Stage 6: metrics tables, the papers' tables next to the published numbers, plots, provenance.
# Everything meant for people is wrapped in report(...) for `snakemake --report report.html`.


# The standings (each column's ranks with intervals, and the models tied with the best) come
# from the per-query outcomes behind the metric files (vlbench.metrics.standings).
rule tables:
    input:
        metrics=METRIC_FILES,
        outcomes=OUTCOME_FILES,
    output:
        csv="results/tables/metrics.csv",
        full="results/tables/metrics_full.csv",
        standings="results/tables/standings.csv",
        markdown=expand("results/tables/{benchmark}.md", benchmark=BENCHMARKS),
        not_run="results/tables/not_run.csv",
    params:
        notebook_columns=config["metrics"]["notebook_columns"],
        stats=pick(
            config["metrics"], "confidence", "bootstrap_samples", "permutation_samples", "seed"
        ),
        # What the plan left out (not_run.csv), and every file results/tables/ holds for this
        # config: files of an earlier config there (and its benchmarks' plots and provenance)
        # are moved to results/stale/.
        not_run=NOT_RUN_ROWS,
        current=TABLE_FILES,
        benchmarks=BENCHMARKS,
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/tables/tables.log",
    script:
        "../../scripts/tables.py"


rule benchmark_table:
    input:
        full="results/tables/metrics_full.csv",
    output:
        html=report(
            "results/tables/{benchmark}.html",
            caption="../report/benchmark_table.rst",
            category="{benchmark}",
            subcategory="Metrics",
            labels={"benchmark": "{benchmark}", "figure": "metrics table"},
        ),
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/benchmark_table/{benchmark}.log",
    script:
        "../../scripts/benchmark_table.py"


rule paper_table:
    input:
        full="results/tables/metrics_full.csv",
        reference=REFERENCE_CSV,
        reference_map=REFERENCE_MAP,
    output:
        markdown="results/tables/paper/{table}.md",
        csv="results/tables/paper/{table}.csv",
        latex="results/tables/paper/{table}.tex",
        html=report(
            "results/tables/paper/{table}.html",
            caption="../report/paper_table.rst",
            category="Paper tables",
            labels={"table": "{table}"},
        ),
        rst="results/tables/paper/{table}.rst",
        coverage="results/tables/paper/{table}.coverage.json",
    params:
        benchmarks=BENCHMARKS,
        tolerance=config["tables"]["tolerance"],
        # What the plan left out for missing local data: the table notes it as not run.
        not_run=NOT_RUN,
        # The reference files are inputs (mtime) and fingerprinted (a replacement by an older
        # copy, or an in-place edit that keeps the mtime, reruns the table too).
        reference_files=fingerprint([REFERENCE_CSV, REFERENCE_MAP]),
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/paper_table/{table}.log",
    script:
        "../../scripts/paper_table.py"


# Each paper table's coverage (published cells ours, and why the others are empty) in one file,
# and the report's first page: those lines, then the tables (workflow/report/workflow.rst).
rule paper_summary:
    input:
        coverage=expand("results/tables/paper/{table}.coverage.json", table=PAPER_TABLES),
        fragments=expand("results/tables/paper/{table}.rst", table=PAPER_TABLES),
    output:
        markdown="results/tables/coverage.md",
        front_page="results/tables/front_page.rst",
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/paper_summary/paper_summary.log",
    script:
        "../../scripts/paper_summary.py"


rule plot_benchmark:
    input:
        full="results/tables/metrics_full.csv",
    output:
        curves=report(
            "results/plots/{benchmark}/recall_at_k.png",
            caption="../report/recall_at_k.rst",
            category="{benchmark}",
            subcategory="Plots",
            labels={"benchmark": "{benchmark}", "figure": "Recall@k curves"},
        ),
        bars=report(
            "results/plots/{benchmark}/model_bars.png",
            caption="../report/model_bars.rst",
            category="{benchmark}",
            subcategory="Plots",
            labels={"benchmark": "{benchmark}", "figure": "per-model bars"},
        ),
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/plot_benchmark/{benchmark}.log",
    script:
        "../../scripts/plot_benchmark.py"


# One job per benchmark draws every model's and direction's examples: one start-up, and the
# benchmark's images are read once.
rule qualitative_examples:
    input:
        unpack(benchmark_examples_inputs),
        unpack(prepared_data),
    output:
        [
            report(
                f"results/plots/{{benchmark}}/examples/{model}/{direction}.png",
                caption="../report/examples.rst",
                category="{benchmark}",
                subcategory="Examples",
                labels={"benchmark": "{benchmark}", "model": model, "direction": direction},
            )
            for model, direction in EXAMPLE_PANELS
        ],
    params:
        queries=config["tables"]["qualitative_queries"],
        panels=EXAMPLE_PANELS,
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/qualitative_examples/{benchmark}.log",
    script:
        "../../scripts/qualitative_examples.py"


rule provenance:
    input:
        meta="results/data/{benchmark}/benchmark.json",
        embeddings=expand(
            "results/embeddings/{model}/{{benchmark}}/{modality}.json",
            model=MODELS,
            modality=["image", "text"],
        ),
        # The `benchmark:` files of the benchmark's prepare, embed and evaluate jobs.
        timings=benchmark_timings,
        # Written once every result of the benchmark is in the tables it describes.
        full="results/tables/metrics_full.csv",
    output:
        csv="results/provenance/{benchmark}.csv",
        html=report(
            "results/provenance/{benchmark}.html",
            caption="../report/provenance.rst",
            category="{benchmark}",
            subcategory="Provenance",
            labels={"benchmark": "{benchmark}", "figure": "provenance"},
        ),
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/provenance/{benchmark}.log",
    script:
        "../../scripts/provenance.py"


# The end of a run says what the plan left out and which metrics could not be computed
# (results/tables/not_run.csv lists both), which images a benchmark left out, and how much of
# each paper table it filled (results/tables/coverage.md).
onsuccess:
    remove_failed_run_note()
    if NOT_RUN_ROWS:
        logger.info(not_run_summary(NOT_RUN_ROWS, "results/tables/not_run.csv"))
    for _line in not_computable_summary(
        read_not_run("results/tables/not_run.csv"), "results/tables/not_run.csv"
    ):
        logger.warning(_line)
    for _line in skipped_images_summary(BENCHMARKS):
        logger.warning(_line)
    for _line in coverage_lines_of("results/tables/coverage.md"):
        logger.info(_line)


# The last lines of a failed run name each failed job's one-line cause and its log (printed at
# exit, after Snakemake's own lines), and a note beside the tables says they are from an earlier
# run (the next complete run removes it). An interrupted run ends on its one line.
onerror:
    _causes = [INTERRUPTED] if interrupted() else failed_job_causes(log)
    _earlier = write_failed_run_note(_causes)
    if not interrupted():
        say_last(
            [f"vlbench: the tables are from an earlier run ({FAILED_RUN_NOTE})"] * _earlier
            + _causes
        )


# Our results in the formats other tools read: mteb result files (the benchmarks that are mteb
# tasks: BioVITA; load them with mteb.ResultCache(cache_path="results/mteb")) and clip_benchmark
# result files (merge them with `clip_benchmark build results/clip_benchmark ...`).
rule export_results:
    input:
        full="results/tables/metrics_full.csv",
        meta=expand("results/data/{benchmark}/benchmark.json", benchmark=BENCHMARKS),
        identities=expand(EMBEDDING_IDENTITY, model=MODELS),
    output:
        mteb=directory("results/mteb"),
        clip_benchmark=directory("results/clip_benchmark"),
    params:
        benchmarks=BENCHMARKS,
        models=MODELS,
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/export_results/export_results.log",
    script:
        "../../scripts/export_results.py"


# A static page of every paper table and benchmark table, sortable and filterable, opened
# from disk (no server).
rule leaderboard:
    input:
        full="results/tables/metrics_full.csv",
        paper=expand("results/tables/paper/{table}.csv", table=PAPER_TABLES),
        coverage=expand("results/tables/paper/{table}.coverage.json", table=PAPER_TABLES),
    output:
        html="results/leaderboard.html",
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/leaderboard/leaderboard.log",
    script:
        "../../scripts/leaderboard.py"
