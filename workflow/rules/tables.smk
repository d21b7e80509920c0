# Stage 6: metrics tables, the papers' tables next to the published numbers, plots, provenance.
# Everything meant for people is wrapped in report(...) for `snakemake --report report.html`.

from vlbench.fingerprints import fingerprint
from vlbench.paper_tables import layouts_for
from vlbench.reference import read_map
from vlbench.report_targets import table_targets

_tables = config["tables"]
REFERENCE_DIR = Path(workflow.basedir) / "config" / "reference"
REFERENCE_CSV = _tables["reference"] or str(REFERENCE_DIR / "published_results.csv")
REFERENCE_MAP = _tables["map"] or str(REFERENCE_DIR / "map.yaml")
try:
    _reference_map = read_map(REFERENCE_MAP)
except VlbenchError as error:
    raise WorkflowError(str(error)) from None
PAPER_TABLES = [layout.table for layout in layouts_for(BENCHMARKS, _reference_map)]
TABLE_TARGETS = table_targets(
    PAPER_TABLES,
    {key: config["benchmarks"][key]["protocol"] for key in BENCHMARKS},
    MODELS,
    list(DIRECTIONS),
    _tables["qualitative_queries"],
)



wildcard_constraints:
    table="|".join(map(re.escape, PAPER_TABLES)) or "no-paper-table",


rule tables:
    input:
        metrics=metric_files(config),
    output:
        csv="results/tables/metrics.csv",
        full="results/tables/metrics_full.csv",
        markdown=expand("results/tables/{benchmark}.md", benchmark=BENCHMARKS),
    params:
        notebook_columns=config["metrics"]["notebook_columns"],
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
    params:
        benchmarks=BENCHMARKS,
        tolerance=config["tables"]["tolerance"],
        # The reference files are inputs (mtime) and fingerprinted (a replacement by an older
        # copy, or an in-place edit that keeps the mtime, reruns the table too).
        reference_files=fingerprint([REFERENCE_CSV, REFERENCE_MAP]),
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/paper_table/{table}.log",
    script:
        "../../scripts/paper_table.py"


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


rule qualitative_examples:
    input:
        queries=lambda wildcards: "results/embeddings/{model}/{benchmark}/%s.npy"
        % query_and_gallery(wildcards)[0],
        query_ids=lambda wildcards: "results/embeddings/{model}/{benchmark}/%s.ids.parquet"
        % query_and_gallery(wildcards)[0],
        index=lambda wildcards: "results/index/{model}/{benchmark}/%s.faiss"
        % query_and_gallery(wildcards)[1],
        gallery_ids=lambda wildcards: "results/embeddings/{model}/{benchmark}/%s.ids.parquet"
        % query_and_gallery(wildcards)[1],
        ranks="results/ranks/{model}/{benchmark}/{direction}.parquet",
        images="results/data/{benchmark}/images.parquet",
        texts="results/data/{benchmark}/texts.parquet",
        qrels="results/data/{benchmark}/qrels.parquet",
    output:
        png=report(
            "results/plots/{benchmark}/examples/{model}/{direction}.png",
            caption="../report/examples.rst",
            category="{benchmark}",
            subcategory="Examples",
            labels={"benchmark": "{benchmark}", "model": "{model}", "direction": "{direction}"},
        ),
    params:
        queries=config["tables"]["qualitative_queries"],
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/qualitative_examples/{model}/{benchmark}/{direction}.log",
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
        # Every metric job has finished once the full table exists, so every timing file is written.
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
    params:
        timings="results/timings",
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/provenance/{benchmark}.log",
    script:
        "../../scripts/provenance.py"
