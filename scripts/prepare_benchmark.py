"""Rule prepare_benchmark: a benchmark source -> canonical images/texts/qrels parquet."""

from pathlib import Path

from vlbench.prepare import prepare_benchmark
from vlbench.workflow import rule_log

with rule_log(snakemake.log[0]) as log:
    rows = prepare_benchmark(
        benchmark=snakemake.wildcards.benchmark,
        protocol=snakemake.params.protocol,
        source=dict(snakemake.params.source),
        local_dir=snakemake.input.source or None,
        out_dir=Path(snakemake.output.images).parent,
    )
    log.info("prepared %d pairs", rows)
