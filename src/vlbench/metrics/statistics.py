"""Confidence intervals, bootstraps and paired tests over per-query outcome vectors, and the
Wilson bound of a proportion (a published cell against chance)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from vlbench.metrics.t_quantile import student_t_quantile

# Resamples drawn at once, so memory stays at _CHUNK x n_queries values.
_CHUNK = 64
# The normal quantile of a two-sided 95% interval.
Z_95 = 1.959963984540054


def t_interval(outcomes: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Student-t interval of the mean, as the BioMedFlickr notebook computes it.

    ``scipy.stats.t.interval(confidence, n - 1, loc=mean, scale=sem)``, computed as that
    function does (the t quantiles of (1 -/+ confidence) / 2, times ``stats.sem``, plus the
    mean) from scipy's `stdtrit` (`vlbench.metrics.t_quantile`), so that a job imports
    neither `scipy.stats` (about 0.5 s) nor scipy.special's package (about 0.19 s); a zero
    standard error (every outcome equal) or a single query gives the point estimate as both
    bounds.
    """
    values = np.asarray(outcomes, dtype=np.float64)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, mean
    sem = float(np.std(values, ddof=1) / np.sqrt(len(values)))
    if sem == 0.0:
        return mean, mean
    degrees = len(values) - 1
    low = student_t_quantile(degrees, (1.0 - confidence) / 2.0) * sem + mean
    high = student_t_quantile(degrees, (1.0 + confidence) / 2.0) * sem + mean
    return float(low), float(high)


def _resampled(
    values: np.ndarray, statistic: Callable[[np.ndarray], np.ndarray], samples: int, seed: int
) -> np.ndarray:
    """`statistic` (applied along axis 1) of `samples` bootstrap resamples of `values`."""
    rng = np.random.default_rng(seed)
    out = np.empty(samples)
    for start in range(0, samples, _CHUNK):
        stop = min(start + _CHUNK, samples)
        out[start:stop] = statistic(values[_bootstrap_picks(rng, len(values), stop - start)])
    return out


def _mean(matrix: np.ndarray) -> np.ndarray:
    return matrix.mean(axis=1)


def _median(matrix: np.ndarray) -> np.ndarray:
    return np.median(matrix, axis=1)


STATISTICS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"mean": _mean, "median": _median}


def bootstrap_interval(
    outcomes: np.ndarray,
    samples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    statistic: str = "mean",
) -> tuple[float, float]:
    """Seeded percentile bootstrap interval of the mean (or median) of the outcomes."""
    values = np.asarray(outcomes, dtype=np.float64)
    if len(values) < 2 or samples < 1:
        point = float(STATISTICS[statistic](values[None, :])[0])
        return point, point
    draws = _resampled(values, STATISTICS[statistic], samples, seed)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(draws, [alpha, 1.0 - alpha])
    return float(low), float(high)


@dataclass(frozen=True)
class PairedTest:
    """Model A minus model B on the same queries."""

    difference: float
    low: float
    high: float
    p_value: float
    n_queries: int


def paired_test(
    outcomes_a: np.ndarray,
    outcomes_b: np.ndarray,
    bootstrap_samples: int = 1000,
    permutation_samples: int = 10000,
    seed: int = 0,
    confidence: float = 0.95,
) -> PairedTest:
    """Paired comparison of two models' per-query outcomes (same queries, same order).

    The interval is a paired percentile bootstrap of the mean difference; the two-sided p-value
    is a seeded sign-flip permutation test, (1 + #|permuted mean| >= |observed|) / (1 + samples).
    """
    a = np.asarray(outcomes_a, dtype=np.float64)
    b = np.asarray(outcomes_b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes differ in length: {a.shape} vs {b.shape}")
    diff = a - b
    observed = float(diff.mean())
    low, high = bootstrap_interval(diff, bootstrap_samples, seed, confidence)
    if not np.any(diff):
        return PairedTest(observed, low, high, 1.0, len(diff))
    rng = np.random.default_rng(seed + 1)
    extreme = 0
    tolerance = 1e-12 * max(1.0, abs(observed))
    for start in range(0, permutation_samples, _CHUNK):
        stop = min(start + _CHUNK, permutation_samples)
        signs = _sign_flips(rng, len(diff), stop - start)
        permuted = np.abs((signs * diff).mean(axis=1))
        extreme += int(np.count_nonzero(permuted >= abs(observed) - tolerance))
    p_value = (1 + extreme) / (1 + permutation_samples)
    return PairedTest(observed, low, high, p_value, len(diff))


def all_paired_tests(
    outcomes: np.ndarray,
    bootstrap_samples: int = 1000,
    permutation_samples: int = 10000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[tuple[int, int], PairedTest]:
    """`paired_test` of every pair (i, j), i < j, of the rows of `outcomes` (models x queries,
    the same queries in the same order), in one pass over the resamples.

    `paired_test` draws the same bootstrap indices and the same sign flips for every pair of
    one query count (its generators are seeded by `seed` alone), and a mean is linear: the mean
    difference of a resample is the difference of the two models' resample means, and a
    sign-flipped mean difference is the difference of the two models' sign-flipped means. So
    each model's resample means are computed once (models x resamples x queries work) and each
    pair costs only a subtraction over the resamples, not over the queries: 100 models make
    4,950 pairs at the cost of about 100 one-model passes. Equal to `paired_test` up to float
    rounding (tests/metrics/test_statistics.py).
    """
    values = np.asarray(outcomes, dtype=np.float64)
    models, n = values.shape
    pairs = [(i, j) for i in range(models) for j in range(i + 1, models)]
    boot = resampled_means(values, bootstrap_samples, seed)
    flipped = sign_flipped_means(values, permutation_samples, seed + 1)
    alpha = (1.0 - confidence) / 2.0
    tests = {}
    for i, j in pairs:
        diff = values[i] - values[j]
        observed = float(diff.mean())
        if n < 2 or bootstrap_samples < 1:
            low = high = observed
        else:
            low, high = (float(q) for q in np.quantile(boot[i] - boot[j], [alpha, 1.0 - alpha]))
        if not np.any(diff):
            tests[i, j] = PairedTest(observed, low, high, 1.0, n)
            continue
        tolerance = 1e-12 * max(1.0, abs(observed))
        permuted = np.abs(flipped[i] - flipped[j])
        extreme = int(np.count_nonzero(permuted >= abs(observed) - tolerance))
        tests[i, j] = PairedTest(observed, low, high, (1 + extreme) / (1 + permutation_samples), n)
    return tests


def _per_chunk(
    matrices: Sequence[np.ndarray],
    samples: int,
    seed: int,
    draw: Callable[[np.random.Generator, int, int], np.ndarray],
    apply: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> list[np.ndarray]:
    """Per matrix (rows x n, every one of the same n), rows x samples: `apply(matrix, draws)`
    for `draw(rng, n, count)`, `count` samples at a time, drawn in the chunks `_resampled` and
    `paired_test` draw theirs (so from the same stream). Each chunk is drawn once for all the
    matrices: columns of one query count share their resamples."""
    n = matrices[0].shape[1]
    rng = np.random.default_rng(seed)
    outs = [np.empty((matrix.shape[0], samples)) for matrix in matrices]
    for start in range(0, samples, _CHUNK):
        stop = min(start + _CHUNK, samples)
        draws = draw(rng, n, stop - start)
        for matrix, out in zip(matrices, outs, strict=True):
            out[:, start:stop] = apply(matrix, draws)
    return outs


def _bootstrap_picks(rng: np.random.Generator, n: int, count: int) -> np.ndarray:
    return rng.integers(0, n, size=(count, n))


def _picked_means(values: np.ndarray, picks: np.ndarray) -> np.ndarray:
    return values[:, picks].mean(axis=2)


def _sign_flips(rng: np.random.Generator, n: int, count: int) -> np.ndarray:
    return rng.choice(np.array([-1.0, 1.0]), size=(count, n))


def _flipped_means(values: np.ndarray, signs: np.ndarray) -> np.ndarray:
    return values @ signs.T / values.shape[1]


def resampled_means(values: np.ndarray, samples: int, seed: int) -> np.ndarray:
    """Each row's mean over the bootstrap resamples `_resampled` draws (rows x samples)."""
    return resampled_means_of([values], samples, seed)[0]


def sign_flipped_means(values: np.ndarray, samples: int, seed: int) -> np.ndarray:
    """Each row's mean under the sign flips `paired_test` draws (rows x samples)."""
    return sign_flipped_means_of([values], samples, seed)[0]


def resampled_means_of(matrices: Sequence[np.ndarray], samples: int, seed: int) -> list[np.ndarray]:
    """`resampled_means` of each matrix (all of one query count), drawing each resample once."""
    return _per_chunk(matrices, samples, seed, _bootstrap_picks, _picked_means)


def sign_flipped_means_of(
    matrices: Sequence[np.ndarray], samples: int, seed: int
) -> list[np.ndarray]:
    """`sign_flipped_means` of each matrix (all of one query count), drawing each flip once."""
    return _per_chunk(matrices, samples, seed, _sign_flips, _flipped_means)


def indistinguishable_from_chance(
    ci_low: float, ci_high: float, chance: float | None, higher_is_better: bool = True
) -> bool | None:
    """True when the interval does not lie strictly on the better side of the chance level."""
    if chance is None or not np.isfinite(chance):
        return None
    return bool(ci_low <= chance) if higher_is_better else bool(ci_high >= chance)


def wilson_low(percent: float, n: int) -> float:
    """Lower bound, in percent, of the 95% Wilson interval of a proportion over n queries."""
    p = min(max(percent / 100.0, 0.0), 1.0)
    denominator = 1.0 + Z_95**2 / n
    centre = p + Z_95**2 / (2 * n)
    spread = Z_95 * math.sqrt(p * (1 - p) / n + Z_95**2 / (4 * n * n))
    return 100.0 * (centre - spread) / denominator
