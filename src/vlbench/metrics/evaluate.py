"""The evaluate rule's work: one (model, benchmark), every direction of its protocol.

One job builds the faiss index of each gallery modality its directions search, ranks every
direction exactly, scores it (metric rows and per-query outcomes) and, for a protocol with a
per-class table, writes that table: one start-up instead of one per step and direction, and every
per-direction result still a file of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlbench.embedding.matrix_files import require_gathered_intact
from vlbench.metrics.job import write_metrics, write_per_class
from vlbench.paths import galleries
from vlbench.protocols import DIRECTIONS, Protocol
from vlbench.rank.index import build_flat_index
from vlbench.rank.job import rank_direction


@dataclass(frozen=True)
class EvaluationFiles:
    """Where one evaluation job writes: indexes by gallery, ranks/metrics/outcomes by direction."""

    indexes: dict[str, Path]
    ranks: dict[str, Path]
    metrics: dict[str, Path]
    outcomes: dict[str, Path]
    per_class: Path | None

    @classmethod
    def from_outputs(
        cls, protocol: Protocol, directions: Sequence[str], outputs: Mapping[str, Any]
    ) -> EvaluationFiles:
        """The files of a job's named outputs (the names of `paths.evaluation_outputs`)."""

        def by(kind: str, keys: list[str]) -> dict[str, Path]:
            return {key: Path(outputs[f"{kind}_{key}"]) for key in keys}

        directions = list(directions)
        return cls(
            indexes=by("index", galleries(directions)),
            ranks=by("ranks", directions),
            metrics=by("metrics", directions),
            outcomes=by("outcomes", directions),
            per_class=Path(outputs["per_class"]) if protocol.per_class else None,
        )


@dataclass(frozen=True)
class EmbeddingMatrix:
    """A gathered embedding matrix and its row ids."""

    embeddings: Path
    ids: Path


def evaluate(
    protocol: Protocol,
    directions: Sequence[str],
    labels: dict[str, str],
    embeddings: Mapping[str, EmbeddingMatrix],
    data_dir: Path,
    out: EvaluationFiles,
    ks: list[int],
    ranking: Mapping[str, Any],
    stats: dict[str, Any] | None,
) -> dict[str, int]:
    """Index, rank and score each of the benchmark's directions; return the ranked pairs per
    direction.

    `labels` holds benchmark, subset and model; `ranking` the tie policy and block size.
    """
    # Every matrix the job reads (and its ids) is checked against its digests once, here.
    queries = [DIRECTIONS[direction][0] for direction in directions]
    for modality in dict.fromkeys([*out.indexes, *queries]):  # galleries first
        require_gathered_intact(embeddings[modality].embeddings)
    for gallery, index in out.indexes.items():
        build_flat_index(embeddings[gallery].embeddings, index)
    pairs = {}
    for direction in directions:
        query, gallery = DIRECTIONS[direction]
        pairs[direction] = rank_direction(
            protocol=protocol,
            direction=direction,
            queries_npy=embeddings[query].embeddings,
            query_ids_path=embeddings[query].ids,
            index_path=out.indexes[gallery],
            gallery_ids_path=embeddings[gallery].ids,
            data_dir=data_dir,
            out_path=out.ranks[direction],
            tie_policy=ranking["tie_policy"],
            block_mb=ranking["block_mb"],
        )
        write_metrics(
            out.ranks[direction],
            protocol=protocol,
            ks=ks,
            labels={**labels, "direction": direction},
            tie_policy=ranking["tie_policy"],
            stats=stats,
            metrics_path=out.metrics[direction],
            outcomes_path=out.outcomes[direction],
        )
    if out.per_class is not None:
        write_per_class(out.ranks["image_to_text"], labels, out.per_class)
    return pairs
