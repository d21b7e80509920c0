"""Rule paired_tests: every pair of models on the same queries, metric by metric."""

from vlbench.metrics_job import write_csv
from vlbench.metrics_table import StatsSettings, paired_rows
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    stats = {k: v for k, v in dict(snakemake.params.stats).items() if k != "notebook_columns"}
    rows = paired_rows(snakemake.input.outcomes, StatsSettings.from_config(stats))
    write_csv(rows, snakemake.output.csv)
    log.info("%d paired comparisons", rows.height)
