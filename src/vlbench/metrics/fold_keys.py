"""Which config keys of a classifier decide its folds: the folds job's params, read when the
workflow is parsed (so this module imports nothing heavy)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The config keys of each classifier that decide its folds (the rest only its training).
SAMPLER_KEYS = {
    "fewshot": ("shots", "folds", "shuffle"),
    "linear": ("shots", "folds", "validation_proportion"),
    "logistic": ("shots", "folds", "seed"),
}


def classifier_settings(benchmark: Mapping[str, Any], classifier: str) -> Mapping[str, Any]:
    """A classifier's entry of a benchmark's config: `fewshot`, or `probe.<classifier>`."""
    return benchmark["fewshot"] if classifier == "fewshot" else benchmark["probe"][classifier]


def sampler_settings(benchmark: Mapping[str, Any], classifier: str) -> dict[str, Any]:
    """The keys of a classifier's entry that decide its folds (the folds job's params)."""
    settings = classifier_settings(benchmark, classifier)
    return {key: settings[key] for key in SAMPLER_KEYS[classifier] if key in settings}
