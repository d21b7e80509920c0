"""Rule tables: results/tables/metrics.csv and one Markdown table per benchmark."""

from pathlib import Path

from vlbench.tables import write_tables
from vlbench.workflow import rule_log

with rule_log(snakemake.log[0]) as log:
    write_tables(snakemake.input.metrics, snakemake.output.csv, Path(snakemake.output.csv).parent)
    log.info("wrote %s", snakemake.output.csv)
