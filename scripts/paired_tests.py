"""Rule paired_tests: every pair of models on the same queries, metric by metric."""

from vlbench.metrics.job import write_csv
from vlbench.metrics.rows import StatsSettings, paired_rows
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    rows = paired_rows(
        snakemake.input.outcomes, StatsSettings.from_config(dict(snakemake.params.stats))
    )
    write_csv(rows, snakemake.output.csv)
    log.info("%d paired comparisons", rows.height)
