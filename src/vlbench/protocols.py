"""The protocol registry: every stage asks here what a benchmark's protocol implies.

One record per protocol: its directions, how its ranks are computed, which metric family it
reports, and what else it needs or makes. Protocol names appear as string literals only here
(other modules use the names below; the config schema's enum is checked against `PROTOCOLS` in
tests/test_registries.py). Adding a protocol: a record here, its ranking in
`vlbench.rank.protocol_ranks`, its metrics in `vlbench.metrics.specs`, and the source formats
that feed it in `vlbench.data.sources.FORMATS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vlbench.errors import VlbenchError

PAIRED = "paired"
MULTI_POSITIVE = "multi_positive"
TAXON_CANDIDATES = "taxon_candidates"
ZEROSHOT = "zeroshot"
RERANK = "rerank"

# direction -> (query modality, gallery modality)
DIRECTIONS = {"image_to_text": ("image", "text"), "text_to_image": ("text", "image")}


def direction_sides(direction: str) -> tuple[str, str]:
    """(query modality, gallery modality) of a direction named `<query>_to_<gallery>` (the
    ranking directions, and `image_to_image` of the few-shot and probe rows)."""
    query, _, gallery = direction.partition("_to_")
    return (query, gallery) if gallery else (direction, "")


def direction_label(direction: str) -> str:
    """How tables name a direction: `image→text`."""
    query, gallery = direction_sides(direction)
    return f"{query}→{gallery}" if gallery else direction


BOTH = ("image_to_text", "text_to_image")


@dataclass(frozen=True)
class Protocol:
    """What one evaluation protocol implies for every stage."""

    name: str
    directions: tuple[str, ...]
    # How ranks are computed (`vlbench.rank.protocol_ranks.RANKINGS`): "judged" (relevance
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
    # Images carry their class: few-shot accuracy (BioCLIP's protocol) is computed from the
    # cached image embeddings (the benchmark's `fewshot` config entry).
    fewshot: bool = False
    # Formats whose layout puts the queries on the other side: format -> the directions it
    # evaluates instead of `directions` (BioVITA's text-to-image repository).
    format_directions: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def directions_of(self, format_name: str | None) -> tuple[str, ...]:
        """The directions a benchmark read with `format_name` (None: the default) evaluates."""
        return dict(self.format_directions).get(format_name or "", self.directions)

    @property
    def all_directions(self) -> tuple[str, ...]:
        """Every direction some format of the protocol evaluates."""
        found = [*self.directions, *(d for _, ds in self.format_directions for d in ds)]
        return tuple(dict.fromkeys(found))

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
        # BioVITA's image->text and text->image tasks are two hub repositories whose queries are
        # images (candidates: taxon names) or taxon names (candidates: images).
        Protocol(
            TAXON_CANDIDATES,
            ("image_to_text",),
            ranking="pooled_groups",
            metrics="taxon_top_k",
            format_directions=(("biovita_t2i", ("text_to_image",)),),
        ),
        Protocol(
            ZEROSHOT,
            ("image_to_text",),
            ranking="classes",
            metrics="classification",
            per_class=True,
            fewshot=True,
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


def benchmark_directions(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The directions a configured benchmark evaluates (its protocol's, fixed by its format)."""
    return protocol(spec["protocol"]).directions_of((spec.get("source") or {}).get("format"))


@dataclass(frozen=True, order=True)
class Evaluation:
    """What one evaluate rule does: a protocol over the directions its benchmarks evaluate."""

    protocol: str
    directions: tuple[str, ...]

    @property
    def rule(self) -> str:
        """evaluate_<protocol>, with the directions when they are not the protocol's own."""
        own = protocol(self.protocol).directions
        return f"evaluate_{self.protocol}" + (
            "" if self.directions == own else "_" + "_".join(self.directions)
        )


def evaluation_of(spec: Mapping[str, Any]) -> Evaluation:
    """The evaluation a configured benchmark gets."""
    return Evaluation(spec["protocol"], benchmark_directions(spec))


def evaluations(benchmarks: Mapping[str, Mapping[str, Any]]) -> list[Evaluation]:
    """The distinct evaluations of the configured benchmarks, in a stable order."""
    return sorted({evaluation_of(spec) for spec in benchmarks.values()})
