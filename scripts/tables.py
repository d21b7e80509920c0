"""Rule tables: results/tables/metrics.csv, metrics_full.csv and a Markdown table per benchmark."""

from pathlib import Path

from vlbench.report.tables import write_tables
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    write_tables(
        snakemake.input.metrics,
        snakemake.output.csv,
        Path(snakemake.output.csv).parent,
        full_csv=snakemake.output.full,
        notebook_names=snakemake.params.notebook_columns,
    )
    log.info("wrote %s and %s", snakemake.output.csv, snakemake.output.full)
