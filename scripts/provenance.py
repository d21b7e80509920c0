"""Rule provenance: weights, dataset revision, versions, device and timings behind one benchmark."""

from vlbench.report.provenance import collect_provenance, write_provenance
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    record = collect_provenance(
        snakemake.wildcards.benchmark,
        snakemake.input.meta,
        snakemake.input.embeddings,
        snakemake.input.timings,
    )
    write_provenance(record, snakemake.output.csv, snakemake.output.html)
    log.info("%d embedding jobs, %d timed jobs", len(record["embeddings"]), len(record["timings"]))
