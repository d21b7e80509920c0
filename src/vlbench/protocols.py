"""The protocol registry: every stage asks here what a benchmark's protocol implies.

One record per protocol: its directions, how its ranks are computed, which metric family it
reports, and what else it needs or makes. Protocol names appear as string literals only here
(other modules use the names below; the config schema's enum is checked against `PROTOCOLS` in
tests/test_registries.py). Adding a protocol: a record here, its ranking in
`vlbench.rank.protocol_ranks`, its metrics in `vlbench.metrics.specs`, and the source formats
that feed it in `vlbench.data.sources.FORMATS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from vlbench.errors import VlbenchError

PAIRED = "paired"
MULTI_POSITIVE = "multi_positive"
TAXON_CANDIDATES = "taxon_candidates"
ZEROSHOT = "zeroshot"
RERANK = "rerank"

# direction -> (query modality, gallery modality)
DIRECTIONS = {"image_to_text": ("image", "text"), "text_to_image": ("text", "image")}
BOTH = ("image_to_text", "text_to_image")


@dataclass(frozen=True)
class Protocol:
    """What one evaluation protocol implies for every stage."""

    name: str
    directions: tuple[str, ...]
    # How ranks are computed (`vlbench.rank.protocol_ranks.RANKERS`): "judged" (relevance
    # judgements, optionally restricted to candidate lists), "pooled_groups" (each query's
    # candidate taxa, scored by the max over their entries), "classes" (class prototypes).
    ranking: str
    # Which metrics it reports (`vlbench.metrics.specs.METRIC_FAMILIES`).
    metrics: str
    # Images and texts are items judged against each other over the whole other modality:
    # texts follow their images in the canonical order, and qualitative examples apply.
    item_retrieval: bool = False
    # Every query must come with its candidate list (others: optional restriction).
    candidates_required: bool = False
    # Metrics are also reported per query group (the `subset` column).
    grouped: bool = False
    # A per-class accuracy table is written.
    per_class: bool = False

    @property
    def needs_judgements(self) -> bool:
        """Whether ranking reads the relevance judgements (qrels)."""
        return self.ranking == "judged"


PROTOCOLS: dict[str, Protocol] = {
    record.name: record
    for record in (
        Protocol(
            PAIRED,
            BOTH,
            ranking="judged",
            metrics="recall",
            item_retrieval=True,
        ),
        Protocol(
            MULTI_POSITIVE,
            BOTH,
            ranking="judged",
            metrics="multi_recall",
            item_retrieval=True,
        ),
        Protocol(
            TAXON_CANDIDATES,
            ("image_to_text",),
            ranking="pooled_groups",
            metrics="taxon_top_k",
        ),
        Protocol(
            ZEROSHOT,
            ("image_to_text",),
            ranking="classes",
            metrics="classification",
            per_class=True,
        ),
        Protocol(
            RERANK,
            ("text_to_image",),
            ranking="judged",
            metrics="average_precision",
            candidates_required=True,
            grouped=True,
        ),
    )
}


def protocol(name: str) -> Protocol:
    """The registry record of `name`; a one-line error naming the known ones otherwise."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise VlbenchError(f"unknown protocol {name!r} (known: {', '.join(PROTOCOLS)})") from None
