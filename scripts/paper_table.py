"""Rule paper_table: one paper's table, ours next to the published numbers (md, csv, tex, html)."""

from pathlib import Path

from vlbench.report.paper_layouts import LAYOUTS
from vlbench.report.paper_tables import build_paper_table
from vlbench.report.reference import read_map, read_reference
from vlbench.report.table_writers import write_paper_table
from vlbench.report.tables import read_full_metrics
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    table = build_paper_table(
        LAYOUTS[snakemake.wildcards.table],
        read_full_metrics(snakemake.input.full),
        read_reference(snakemake.input.reference),
        read_map(snakemake.input.reference_map),
        list(snakemake.params.benchmarks),
        float(snakemake.params.tolerance),
        dict(snakemake.params.not_run),
    )
    paths = write_paper_table(table, Path(snakemake.output.markdown).parent)
    log.info("%d rows; wrote %s", len(table.rows), ", ".join(map(str, paths)))
