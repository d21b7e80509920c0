"""Rule write_synthetic_source: a synthetic benchmark in the BioMedFlickr hub layout."""

from vlbench.data.synthetic import write_synthetic_biomedflickr
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    settings = snakemake.params.synthetic
    log.info("writing %d synthetic pairs (seed %d)", settings["pairs"], settings["seed"])
    write_synthetic_biomedflickr(
        snakemake.output[0], settings["pairs"], settings["seed"], snakemake.params.split
    )
