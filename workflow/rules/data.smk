# Stage 1: benchmark sources -> canonical parquet (images, texts, judgements, candidate lists).

from vlbench.data.sources.spec import local_root, protocol_settings
from vlbench.paths import PREPARE_TIMINGS, PREPARED_FILES, SYNTHETIC_SOURCE
from vlbench.planning.rule_inputs import source_input


rule write_synthetic_source:
    output:
        directory(SYNTHETIC_SOURCE),
    params:
        synthetic=lambda wildcards: benchmark_source(wildcards)["synthetic"],
        split=lambda wildcards: benchmark_source(wildcards)["split"],
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/write_synthetic_source/{benchmark}.log",
    script:
        "../../scripts/write_synthetic_source.py"


rule prepare_benchmark:
    input:
        source=lambda wildcards: source_input(wildcards.benchmark, benchmark_source(wildcards)),
    output:
        **PREPARED_FILES,
    params:
        source=benchmark_source,
        protocol=lambda wildcards: config["benchmarks"][wildcards.benchmark]["protocol"],
        settings=lambda wildcards: protocol_settings(
            config["benchmarks"][wildcards.benchmark], f"benchmarks.{wildcards.benchmark}"
        ),
        local_dir=lambda wildcards: local_root(wildcards.benchmark, benchmark_source(wildcards)),
        source_files=lambda wildcards: JOB_PARAMS.source_files(wildcards.benchmark),
    # Threads that decode images to check them (image_policy: skip); a speed knob read from
    # the config, not a param, so changing it reruns nothing (vlbench.config.RUN_TIME_KEYS).
    threads: config["prepare"]["threads"]
    conda:
        "../../envs/vlbench.yaml"
    log:
        "logs/prepare_benchmark/{benchmark}.log",
    benchmark:
        PREPARE_TIMINGS
    script:
        "../../scripts/prepare_benchmark.py"
