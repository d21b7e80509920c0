"""Rule evaluate_<protocol>: indexes, exact ranks, metrics (and per-class results) of every
direction of one (model, benchmark)."""

import json
from pathlib import Path

from vlbench.metrics.evaluate import EmbeddingMatrix, EvaluationFiles, evaluate
from vlbench.protocols import protocol
from vlbench.rule_log import rule_log

with rule_log(snakemake.log[0]) as log:
    with open(snakemake.input.meta, encoding="utf-8") as handle:
        meta = json.load(handle)
    record = protocol(snakemake.params.protocol)
    directions = list(snakemake.params.directions)
    pairs = evaluate(
        record,
        directions,
        labels={
            "benchmark": snakemake.wildcards.benchmark,
            "subset": meta.get("subset") or meta["split"],
            "model": snakemake.wildcards.model,
        },
        embeddings={
            modality: EmbeddingMatrix(
                Path(snakemake.input[f"{modality}_embeddings"]),
                Path(snakemake.input[f"{modality}_ids"]),
            )
            for modality in ("image", "text")
        },
        data_dir=Path(snakemake.input.qrels).parent,
        out=EvaluationFiles.from_outputs(record, directions, snakemake.output),
        ks=list(snakemake.params.k),
        # block_mb is a memory knob, read from the config so that changing it reruns nothing.
        ranking={**snakemake.params.ranking, "block_mb": snakemake.config["ranking"]["block_mb"]},
        stats=dict(snakemake.params.stats),
    )
    for direction, count in pairs.items():
        log.info("%s: ranked %d relevant pairs", direction, count)
