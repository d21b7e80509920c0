"""Rule export_results: our results in other tools' formats: mteb result files for the
benchmarks that are mteb tasks (results/mteb/) and clip_benchmark result files
(results/clip_benchmark/)."""

import json
from pathlib import Path

from vlbench.atomic import atomic_directory
from vlbench.report.clip_benchmark_results import clip_benchmark_files
from vlbench.report.mteb_results import mteb_task_files
from vlbench.report.tables import read_full_metrics
from vlbench.rule_log import rule_log


def read_json(path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


with rule_log(snakemake.log[0]) as log:
    metrics = read_full_metrics(snakemake.input.full)
    benchmarks = {
        benchmark: read_json(path)
        for benchmark, path in zip(snakemake.params.benchmarks, snakemake.input.meta, strict=True)
    }
    models = {
        model: read_json(path)["identity"]["model"]
        for model, path in zip(snakemake.params.models, snakemake.input.identities, strict=True)
    }
    for output, files in (
        (snakemake.output.mteb, mteb_task_files(metrics, benchmarks, models)),
        (snakemake.output.clip_benchmark, clip_benchmark_files(metrics, benchmarks, models)),
    ):
        with atomic_directory(output) as folder:
            for name, record in files.items():
                path = folder / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        log.info("%s: %d file(s)", output, len(files))
