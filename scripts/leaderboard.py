"""Rule leaderboard: the static, sortable and filterable leaderboard page of every table."""

from vlbench.report.leaderboard import write_leaderboard
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    write_leaderboard(
        snakemake.input.full,
        snakemake.input.paper,
        snakemake.input.coverage,
        snakemake.output.html,
    )
    log.info("wrote %s", snakemake.output.html)
