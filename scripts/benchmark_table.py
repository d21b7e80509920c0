"""Rule benchmark_table: one benchmark's metrics as an HTML table for the report."""

from vlbench.atomic import write_text
from vlbench.report.tables import html_table, read_full_metrics
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    metrics = read_full_metrics(snakemake.input.full)
    write_text(snakemake.output.html, html_table(metrics, snakemake.wildcards.benchmark))
    log.info("wrote %s", snakemake.output.html)
