"""Rule embed: one modality of one benchmark through one model."""

import os
from pathlib import Path

from vlbench.embed import run_embedding
from vlbench.models import load_open_clip
from vlbench.workflow import rule_log

with rule_log(snakemake.log[0]) as log:
    spec = dict(snakemake.params.model)
    model = load_open_clip(spec)
    log.info(
        "model %s on %s (CUDA_VISIBLE_DEVICES=%s)",
        spec["name"],
        model.device,
        os.environ.get("CUDA_VISIBLE_DEVICES"),
    )
    run_embedding(
        model,
        spec,
        snakemake.wildcards.modality,
        Path(snakemake.input.data),
        snakemake.params.batch_size,
        Path(snakemake.output.embeddings),
        Path(snakemake.output.ids),
        Path(snakemake.output.provenance),
    )
