"""Rule qualitative_examples: top-5 items from the index for a few fixed queries, correct marked."""

from pathlib import Path

from vlbench.report.qualitative import write_examples
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    wildcards = snakemake.wildcards
    shown = write_examples(
        snakemake.input.queries,
        snakemake.input.query_ids,
        snakemake.input.index,
        snakemake.input.gallery_ids,
        snakemake.input.qrels,
        snakemake.input.ranks,
        Path(snakemake.input.images).parent,
        wildcards.direction,
        snakemake.params.queries,
        f"{wildcards.model} on {wildcards.benchmark}, {wildcards.direction}",
        snakemake.output.png,
    )
    log.info("%d example queries in %s", shown, snakemake.output.png)
