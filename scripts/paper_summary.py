"""Rule paper_summary: every paper table's coverage line, and the report's front page."""

from vlbench.report.summary import write_summary
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    lines = write_summary(
        snakemake.input.coverage,
        snakemake.input.fragments,
        snakemake.output.markdown,
        snakemake.output.front_page,
    )
    for line in lines:
        log.info("%s", line)
