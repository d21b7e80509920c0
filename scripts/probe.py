"""Rule probe: a probe classifier trained and scored on a model's cached image embeddings."""

import torch

from vlbench.embedding.matrix_files import load_embeddings
from vlbench.metrics.fold_rows import row_labels
from vlbench.metrics.probe_job import write_probe
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    # One thread whatever the run's cores: float sums may group differently with more threads,
    # and a number must not depend on how the run was started (benchmarks/RESULTS.md, "Probes").
    torch.set_num_threads(1)
    rows = write_probe(
        snakemake.wildcards.classifier,
        load_embeddings(snakemake.input.embeddings, snakemake.input.ids),
        snakemake.input.images,
        snakemake.input.folds,
        dict(snakemake.params.settings),
        row_labels(snakemake.input.meta, snakemake.wildcards.benchmark, snakemake.wildcards.model),
        float(snakemake.params.confidence),
        snakemake.output.metrics,
        log,
    )
    log.info("%d probe metric rows", rows)
