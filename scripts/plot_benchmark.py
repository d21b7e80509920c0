"""Rule plot_benchmark: Recall@k curves and per-model bars with 95% intervals for one benchmark."""

from vlbench.report.plots import write_benchmark_plots
from vlbench.report.tables import read_full_metrics
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    write_benchmark_plots(
        read_full_metrics(snakemake.input.full),
        snakemake.wildcards.benchmark,
        snakemake.output.curves,
        snakemake.output.bars,
    )
    log.info("wrote %s and %s", snakemake.output.curves, snakemake.output.bars)
