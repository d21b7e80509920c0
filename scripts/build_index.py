"""Rule build_index: a faiss IndexFlatIP over one gallery's embeddings."""

from vlbench.warm.client import hand_over_script

# In the rule's own process: run this script in a warm worker's child (see the module).
hand_over_script(snakemake, globals())

from vlbench.rank.index import build_flat_index
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    size = build_flat_index(snakemake.input.embeddings, snakemake.output.index)
    log.info("indexed %d vectors", size)
