"""Rule prepare_benchmark: a benchmark source -> canonical images/texts/qrels/candidates parquet."""

from pathlib import Path

from vlbench.data.prepare import prepare_benchmark
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    meta = prepare_benchmark(
        benchmark=snakemake.wildcards.benchmark,
        protocol=snakemake.params.protocol,
        source=dict(snakemake.params.source),
        local_dir=snakemake.params.local_dir or None,
        out_dir=Path(snakemake.output.images).parent,
        settings=dict(snakemake.params.settings),
        # A speed knob (prepare.threads, RUN_TIME_KEYS): the rule's threads, not a param.
        threads=snakemake.threads,  # after --set-threads and the --cores cap
    )
    log.info(
        "prepared %d images, %d texts, %d judgements (%d images skipped)",
        meta["n_images"],
        meta["n_texts"],
        meta["n_qrels"],
        meta["n_skipped_images"],
    )
