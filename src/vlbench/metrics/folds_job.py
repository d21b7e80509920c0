"""The folds job: which images train each fold of a classifier (the few-shot evaluation or a
probe) on one benchmark, drawn once with its reference's sampler and written down.

Kept apart from the probe job so that drawing folds imports neither torch nor the
classifiers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vlbench.atomic import atomic_path
from vlbench.errors import VlbenchError
from vlbench.metrics.fewshot_job import labelled_images
from vlbench.metrics.probe_folds import draw_folds, folds_table


def write_folds(
    images_path: str | Path,
    classifier: str,
    settings: Mapping[str, Any],
    out_path: str | Path,
    log: logging.Logger | None = None,
) -> int:
    """Draw a classifier's folds from the images file and write them; return the row count."""
    ids, groups = labelled_images(images_path)
    try:
        folds = draw_folds(classifier, groups, dict(settings))
    except VlbenchError as error:
        raise VlbenchError(f"{images_path}: {error}") from None
    for item in folds:
        if item.not_computable and log is not None:
            log.warning(
                "%s probe, fold %d: not computable: %s", classifier, item.fold, item.not_computable
            )
    table = folds_table(classifier, folds, ids)
    with atomic_path(out_path) as tmp:
        table.write_parquet(tmp)
    return table.height
