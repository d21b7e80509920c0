"""The protocol registry: every stage asks here what a benchmark's protocol implies.

One record per protocol: its directions, the source formats it reads (the first is the default),
how its ranks are computed, which metric family it reports, and what else it needs or makes.
Protocol names appear as string literals only here (and in the config schema, whose enum a test
keeps equal to `PROTOCOLS`). Adding a protocol: a record here, its ranking in
`vlbench.rank.protocol_ranks`, its metrics in `vlbench.metrics.specs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vlbench.errors import VlbenchError

# direction -> (query modality, gallery modality)
DIRECTIONS = {"image_to_text": ("image", "text"), "text_to_image": ("text", "image")}
BOTH = ("image_to_text", "text_to_image")


@dataclass(frozen=True)
class Protocol:
    """What one evaluation protocol implies for every stage."""

    name: str
    directions: tuple[str, ...]
    # Source formats it reads (`vlbench.data.sources.FORMATS`), and the one read when a source
    # names none (None: `format` is required).
    formats: tuple[str, ...]
    default_format: str | None
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
    # Formats whose layout fixes the query side: format -> the directions it evaluates (a
    # format not listed here evaluates every direction of the protocol).
    format_directions: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def directions_of(self, format_name: str | None) -> tuple[str, ...]:
        """The directions a benchmark read with `format_name` (None: the default) evaluates."""
        return dict(self.format_directions).get(
            format_name or self.default_format or "", self.directions
        )

    # Images carry their class: few-shot accuracy (BioCLIP's protocol) is computed from the
    # cached image embeddings (the benchmark's `fewshot` config entry).
    fewshot: bool = False

    @property
    def needs_judgements(self) -> bool:
        """Whether ranking reads the relevance judgements (qrels)."""
        return self.ranking == "judged"


PROTOCOLS: dict[str, Protocol] = {
    record.name: record
    for record in (
        Protocol(
            "paired",
            BOTH,
            formats=("hf_parquet", "annotation_csv"),
            default_format="hf_parquet",
            ranking="judged",
            metrics="recall",
            item_retrieval=True,
        ),
        Protocol(
            "multi_positive",
            BOTH,
            formats=("nlphuji_csv_zip", "clip_benchmark_wds", "karpathy_json"),
            default_format=None,
            ranking="judged",
            metrics="multi_recall",
            item_retrieval=True,
        ),
        # BioVITA's image->text and text->image tasks are two hub repositories whose queries are
        # images (candidates: taxon names) or taxon names (candidates: images).
        Protocol(
            "taxon_candidates",
            BOTH,
            formats=("biovita", "biovita_t2i"),
            default_format="biovita",
            ranking="pooled_groups",
            metrics="taxon_top_k",
            format_directions=(
                ("biovita", ("image_to_text",)),
                ("biovita_t2i", ("text_to_image",)),
            ),
        ),
        Protocol(
            "zeroshot",
            ("image_to_text",),
            formats=("imagefolder_csv",),
            default_format="imagefolder_csv",
            ranking="classes",
            metrics="classification",
            per_class=True,
            fewshot=True,
        ),
        Protocol(
            "rerank",
            ("text_to_image",),
            formats=("inquire",),
            default_format="inquire",
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


def protocol_of_format(format_name: str) -> Protocol:
    """The protocol a source format feeds."""
    for record in PROTOCOLS.values():
        if format_name in record.formats:
            return record
    raise VlbenchError(f"source format {format_name!r} feeds no protocol")
