"""Rule qualitative_examples: for every model and direction of one benchmark, the top-5 items
from the index for a few fixed queries, correct items marked."""

from pathlib import Path

from vlbench.report.qualitative import write_examples
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    benchmark = snakemake.wildcards.benchmark
    data_dir = Path(snakemake.input.images).parent
    for panel, (model, direction) in enumerate(snakemake.params.panels):
        shown = write_examples(
            snakemake.input.queries[panel],
            snakemake.input.query_ids[panel],
            snakemake.input.index[panel],
            snakemake.input.gallery_ids[panel],
            snakemake.input.qrels,
            snakemake.input.ranks[panel],
            data_dir,
            direction,
            snakemake.params.queries,
            f"{model} on {benchmark}, {direction}",
            snakemake.output[panel],
        )
        log.info("%d example queries in %s", shown, snakemake.output[panel])
