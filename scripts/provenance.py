"""Rule provenance: weights, dataset revision, versions, device and timings behind one benchmark."""

from vlbench.warm.client import hand_over_script

# In the rule's own process: run this script in a warm worker's child (see the module).
hand_over_script(snakemake, globals())

from vlbench.report.provenance import collect_provenance, write_provenance
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    record = collect_provenance(
        snakemake.wildcards.benchmark,
        snakemake.input.meta,
        snakemake.input.embeddings,
        snakemake.params.timings,
    )
    write_provenance(record, snakemake.output.csv, snakemake.output.html)
    log.info("%d embedding jobs, %d timed jobs", len(record["embeddings"]), len(record["timings"]))
