"""What each protocol evaluates: its directions and the metrics it reports.

Metric names (the `metric` column of the metric CSVs; `k` is the cut-off or empty):

| metric | k | unit | meaning |
| --- | --- | --- | --- |
| `recall` | k | percent | hit rate: any relevant item ranks <= k (CLIP papers' R@k) |
| `true_recall` | k | percent | share of a query's relevant items ranked <= k |
| `ar` | empty | percent | mean of `recall` at k = 1, 5, 10, 20 |
| `mrr` | empty | percent | mean of 1 / rank of the first relevant item |
| `ndcg` | k | percent | nDCG@k, linear gain, log2 discount (trec_eval's ndcg_cut) |
| `mean_rank` | empty | rank | mean rank of the first relevant item |
| `median_rank` | empty | rank | median rank of the first relevant item |
| `taxon_top_k_accuracy` | k | percent | true taxon among the top k max-pooled candidates |
| `zeroshot_top1_accuracy` | 1 | percent | true class ranked first among the class prototypes |
| `zeroshot_top5_accuracy` | 5 | percent | true class among the top 5 |
| `balanced_accuracy` | 1 | percent | mean over classes of the per-class top-1 accuracy |
| `average_precision` | k or empty | percent | INQUIRE's AP@k; empty k = the whole candidate list |
| `fewshot_accuracy` | shots | percent | BioCLIP's few-shot accuracy, k support images per class |

`fewshot_accuracy` rows come from `vlbench.metrics.fewshot_job`, not from ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from vlbench.metrics.outcomes import (
    QueryRanks,
    average_precision,
    average_recall,
    first_rank,
    hit_rate,
    ndcg,
    reciprocal_rank,
    true_recall,
)
from vlbench.protocols import Protocol

Outcome = Callable[[QueryRanks], tuple[np.ndarray, np.ndarray]]

AR_KS = (1, 5, 10, 20)


@dataclass(frozen=True)
class MetricSpec:
    """One metric row: how to get per-query outcomes and how to summarise them."""

    name: str
    k: int | None
    outcome: Outcome
    unit: str = "percent"
    statistic: str = "mean"
    decisive: str = "best"  # which relevant item's ties matter: "best" or "all"

    @property
    def higher_is_better(self) -> bool:
        return self.unit != "rank"


def _rank_metrics(ndcg_ks: Sequence[int] = (10,)) -> list[MetricSpec]:
    """MRR, nDCG@k, mean and median rank: reported for every retrieval task."""
    return [
        MetricSpec("mrr", None, reciprocal_rank),
        *[MetricSpec("ndcg", k, lambda q, k=k: ndcg(q, k), decisive="all") for k in ndcg_ks],
        MetricSpec("mean_rank", None, first_rank, unit="rank"),
        MetricSpec("median_rank", None, first_rank, unit="rank", statistic="median"),
    ]


# The metrics whose unit is a rank, not a percent (lower is better).
RANK_METRICS = tuple(spec.name for spec in _rank_metrics() if spec.unit == "rank")


def _hits(name: str, ks: Sequence[int]) -> list[MetricSpec]:
    return [MetricSpec(name, k, lambda q, k=k: hit_rate(q, k)) for k in sorted(ks)]


def _balanced(q: QueryRanks) -> tuple[np.ndarray, np.ndarray]:
    """Top-1 hits weighted by N / (C * n_class), so their mean is the balanced accuracy."""
    hits, chance = hit_rate(q, 1)
    classes, inverse, counts = np.unique(q.query_groups, return_inverse=True, return_counts=True)
    weights = len(hits) / (len(classes) * counts[inverse.ravel()])
    return hits * weights, chance


def _recall(ks: Sequence[int]) -> list[MetricSpec]:
    return [*_hits("recall", ks), *_rank_metrics()]


def _multi_recall(ks: Sequence[int]) -> list[MetricSpec]:
    return [
        *_hits("recall", ks),
        *[
            MetricSpec("true_recall", k, lambda q, k=k: true_recall(q, k), decisive="all")
            for k in sorted(ks)
        ],
        MetricSpec("ar", None, lambda q: average_recall(q, AR_KS)),
        *_rank_metrics(),
    ]


def _taxon_top_k(ks: Sequence[int]) -> list[MetricSpec]:
    return [*_hits("taxon_top_k_accuracy", ks), *_rank_metrics()]


def _classification(ks: Sequence[int]) -> list[MetricSpec]:
    return [
        MetricSpec("zeroshot_top1_accuracy", 1, lambda q: hit_rate(q, 1)),
        MetricSpec("zeroshot_top5_accuracy", 5, lambda q: hit_rate(q, 5)),
        MetricSpec("balanced_accuracy", 1, _balanced),
    ]


def _average_precision(ks: Sequence[int]) -> list[MetricSpec]:
    return [
        MetricSpec("average_precision", None, lambda q: average_precision(q, None), decisive="all"),
        *[
            MetricSpec(
                "average_precision", k, lambda q, k=k: average_precision(q, k), decisive="all"
            )
            for k in sorted(ks)
        ],
        *_rank_metrics(sorted({10, *ks})),
    ]


# Metric family (the registry's `Protocol.metrics`) -> the metrics for the configured cut-offs.
METRIC_FAMILIES: dict[str, Callable[[Sequence[int]], list[MetricSpec]]] = {
    "recall": _recall,
    "multi_recall": _multi_recall,
    "taxon_top_k": _taxon_top_k,
    "classification": _classification,
    "average_precision": _average_precision,
}


def protocol_metrics(protocol: Protocol, ks: Sequence[int]) -> list[MetricSpec]:
    """The metrics `protocol` reports for the configured cut-offs `ks`."""
    return METRIC_FAMILIES[protocol.metrics](ks)
