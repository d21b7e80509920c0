"""Confidence intervals over per-query outcome vectors."""

from __future__ import annotations

import numpy as np
from scipy import stats


def t_interval(outcomes: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Student-t interval of the mean, as the BioMedFlickr notebook computes it.

    ``scipy.stats.t.interval(confidence, n - 1, loc=mean, scale=sem)``; a zero standard error
    (every outcome equal) or a single query gives the point estimate as both bounds.
    """
    values = np.asarray(outcomes, dtype=np.float64)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, mean
    sem = float(stats.sem(values))
    if sem == 0.0:
        return mean, mean
    low, high = stats.t.interval(confidence, len(values) - 1, loc=mean, scale=sem)
    return float(low), float(high)
