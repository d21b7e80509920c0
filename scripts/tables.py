"""Rule tables: results/tables/metrics.csv, metrics_full.csv, standings.csv, a Markdown table per
benchmark and not_run.csv; files of an earlier config are moved to results/stale/."""

from pathlib import Path

from vlbench.metrics.rows import StatsSettings
from vlbench.report.not_run import not_computable_rows, write_not_run
from vlbench.report.stale_outputs import move_aside, stale_outputs
from vlbench.report.tables import not_computable, write_tables
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    for old, new in move_aside(
        stale_outputs(snakemake.params.current, snakemake.params.benchmarks)
    ):
        log.info("moved %s (not made by the current config) to %s", old, new)
    table = write_tables(
        snakemake.input.metrics,
        snakemake.output.csv,
        Path(snakemake.output.csv).parent,
        full_csv=snakemake.output.full,
        notebook_names=snakemake.params.notebook_columns,
        standings=(
            snakemake.input.outcomes,
            StatsSettings.from_config(dict(snakemake.params.stats)),
            snakemake.output.standings,
        ),
    )
    # What the plan left out, then the metrics that could not be computed.
    missing = not_computable_rows(not_computable(table))
    for row in missing:
        log.warning("not computable: %s: %s", row["key"], row["detail"])
    write_not_run([*snakemake.params.not_run, *missing], snakemake.output.not_run)
    log.info(
        "wrote %s, %s and %s", snakemake.output.csv, snakemake.output.full, snakemake.output.not_run
    )
