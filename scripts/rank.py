"""Rule rank: exact ranks of every relevant gallery item for every query of one direction."""

from vlbench.warm.client import hand_over_script

# In the rule's own process: run this script in a warm worker's child (see the module).
hand_over_script(snakemake, globals())

from pathlib import Path

from vlbench.rank.job import rank_direction
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    pairs = rank_direction(
        protocol=snakemake.params.protocol,
        direction=snakemake.wildcards.direction,
        queries_npy=snakemake.input.queries,
        query_ids_path=snakemake.input.query_ids,
        index_path=snakemake.input.index,
        gallery_ids_path=snakemake.input.gallery_ids,
        data_dir=Path(snakemake.input.qrels).parent,
        out_path=snakemake.output.ranks,
        tie_policy=snakemake.params.ranking["tie_policy"],
        # A memory knob, read from the config so that changing it reruns nothing.
        block_mb=snakemake.config["ranking"]["block_mb"],
    )
    log.info("ranked %d relevant pairs", pairs)
