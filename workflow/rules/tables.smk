# Stage 6: metrics tables, the papers' tables next to the published numbers, plots, provenance.
# Everything meant for people is wrapped in report(...) for `snakemake --report report.html`.

from vlbench.config import pick
from vlbench.paths import (
    BENCHMARK_META,
    CLIP_BENCHMARK_DIR,
    COVERAGE_MD,
    EMBEDDING_FILES,
    EMBEDDING_IDENTITY,
    EXAMPLE_PLOT,
    FRONT_PAGE,
    LEADERBOARD,
    METRICS_CSV,
    METRICS_FULL,
    MODALITIES,
    MTEB_DIR,
    NOT_RUN_CSV,
    PAPER_TABLE_FILES,
    STANDINGS_CSV,
    benchmark_table,
    paper_table_file,
    plot_file,
    provenance_file,
)
from vlbench.planning.fingerprints import fingerprint
from vlbench.planning.rule_inputs import example_panels, examples_inputs, prepared_data

# The examples job of a benchmark draws one panel per (model, direction), in this order.
EXAMPLE_PANELS = example_panels(MODELS)


# The standings (each column's ranks with intervals, and the models tied with the best) come
# from the per-query outcomes behind the metric files (vlbench.metrics.standings).
rule tables:
    input:
        metrics=PLAN.metric_files,
        outcomes=PLAN.outcome_files,
    output:
        csv=METRICS_CSV,
        full=METRICS_FULL,
        standings=STANDINGS_CSV,
        markdown=[benchmark_table(benchmark, "md") for benchmark in BENCHMARKS],
        not_run=NOT_RUN_CSV,
    params:
        notebook_columns=config["metrics"]["notebook_columns"],
        stats=pick(
            config["metrics"], "confidence", "bootstrap_samples", "permutation_samples", "seed"
        ),
        # What the plan left out (not_run.csv), and every file the tables folder holds for this
        # config: files of an earlier config there (and its benchmarks' plots and provenance)
        # are moved to the stale folder (vlbench.report.stale_outputs).
        not_run=PLAN.not_run_rows,
        current=PLAN.table_files,
        benchmarks=BENCHMARKS,
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/tables/tables.log",
    script:
        "../../scripts/tables.py"


rule benchmark_table:
    input:
        full=METRICS_FULL,
    output:
        html=report(
            benchmark_table("{benchmark}", "html"),
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
        full=METRICS_FULL,
        reference=PLAN.reference_csv,
        reference_map=PLAN.reference_map,
    # Every file of vlbench.paths.PAPER_TABLE_FILES (Markdown, CSV, LaTeX, HTML, reST, coverage
    # record), the HTML one in the report.
    output:
        **{
            name: paper_table_file("{table}", name)
            for name in PAPER_TABLE_FILES
            if name != "html"
        },
        html=report(
            paper_table_file("{table}", "html"),
            caption="../report/paper_table.rst",
            category="Paper tables",
            labels={"table": "{table}"},
        ),
    params:
        benchmarks=BENCHMARKS,
        tolerance=config["tables"]["tolerance"],
        # What the plan left out for missing local data: the table notes it as not run.
        not_run=PLAN.not_run,
        # The reference files are inputs (mtime) and fingerprinted (a replacement by an older
        # copy, or an in-place edit that keeps the mtime, reruns the table too).
        reference_files=fingerprint([PLAN.reference_csv, PLAN.reference_map]),
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
        coverage=[paper_table_file(table, "coverage") for table in PAPER_TABLES],
        fragments=[paper_table_file(table, "rst") for table in PAPER_TABLES],
    output:
        markdown=COVERAGE_MD,
        front_page=FRONT_PAGE,
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/paper_summary/paper_summary.log",
    script:
        "../../scripts/paper_summary.py"


rule plot_benchmark:
    input:
        full=METRICS_FULL,
    output:
        curves=report(
            plot_file("{benchmark}", "recall_at_k"),
            caption="../report/recall_at_k.rst",
            category="{benchmark}",
            subcategory="Plots",
            labels={"benchmark": "{benchmark}", "figure": "Recall@k curves"},
        ),
        bars=report(
            plot_file("{benchmark}", "model_bars"),
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
        unpack(lambda wildcards: examples_inputs(EXAMPLE_PANELS, wildcards.benchmark)),
        unpack(prepared_data),
    output:
        [
            report(
                EXAMPLE_PLOT.format(benchmark="{benchmark}", model=model, direction=direction),
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
        meta=BENCHMARK_META,
        embeddings=[
            EMBEDDING_FILES[f"{modality}_provenance"].replace("{model}", model)
            for model in MODELS
            for modality in MODALITIES
        ],
        # The `benchmark:` files of the benchmark's prepare, embed and evaluate jobs.
        timings=EMBED.benchmark_timings,
        # Written once every result of the benchmark is in the tables it describes.
        full=METRICS_FULL,
    output:
        csv=provenance_file("{benchmark}", "csv"),
        html=report(
            provenance_file("{benchmark}", "html"),
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


# Our results in the formats other tools read: mteb result files (the benchmarks that are mteb
# tasks: BioVITA; load them with mteb's ResultCache on the mteb folder) and clip_benchmark result
# files (merge them with `clip_benchmark build <the clip_benchmark folder> ...`; docs/exports.md).
rule export_results:
    input:
        full=METRICS_FULL,
        meta=[BENCHMARK_META.format(benchmark=benchmark) for benchmark in BENCHMARKS],
        identities=expand(EMBEDDING_IDENTITY, model=MODELS),
    output:
        mteb=directory(MTEB_DIR),
        clip_benchmark=directory(CLIP_BENCHMARK_DIR),
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
        full=METRICS_FULL,
        paper=[paper_table_file(table, "csv") for table in PAPER_TABLES],
        coverage=[paper_table_file(table, "coverage") for table in PAPER_TABLES],
    output:
        html=LEADERBOARD,
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/leaderboard/leaderboard.log",
    script:
        "../../scripts/leaderboard.py"
