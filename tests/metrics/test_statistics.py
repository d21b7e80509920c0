"""Intervals, paired tests and chance levels (the latter by exhaustive enumeration)."""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl
import pytest
from scipy import stats

from vlbench.metrics.outcomes import (
    QueryRanks,
    average_precision,
    first_rank,
    hit_rate,
    ndcg,
    reciprocal_rank,
    true_recall,
)
from vlbench.metrics.statistics import (
    bootstrap_interval,
    indistinguishable_from_chance,
    paired_test,
    t_interval,
)


def test_t_interval_is_the_notebook_formula() -> None:
    hits = np.array([1, 0, 0, 1, 1, 0, 1, 1], dtype=float)
    low, high = t_interval(hits)
    mean, sem = hits.mean(), hits.std(ddof=1) / np.sqrt(len(hits))
    half = stats.t.ppf(0.975, len(hits) - 1) * sem
    assert (low, high) == pytest.approx((mean - half, mean + half))


@pytest.mark.parametrize("size", [2, 3, 8, 1000, 5000])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_t_interval_equals_scipy_stats_bit_for_bit(size: int, confidence: float) -> None:
    values = (np.random.default_rng(size).random(size) < 0.4).astype(float)
    values[0], values[-1] = 0.0, 1.0  # never all equal
    expected = stats.t.interval(confidence, size - 1, loc=values.mean(), scale=stats.sem(values))
    assert t_interval(values, confidence) == tuple(float(bound) for bound in expected)


def test_t_interval_of_equal_or_single_outcomes_is_the_point() -> None:
    assert t_interval(np.ones(5)) == (1.0, 1.0)
    assert t_interval(np.array([0.25])) == (0.25, 0.25)


def test_bootstrap_is_seeded_and_brackets_the_mean() -> None:
    values = np.random.default_rng(0).random(500)
    first = bootstrap_interval(values, samples=300, seed=3)
    assert first == bootstrap_interval(values, samples=300, seed=3)
    assert first != bootstrap_interval(values, samples=300, seed=4)
    assert first[0] < values.mean() < first[1]
    t_low, t_high = t_interval(values)
    assert first[0] == pytest.approx(t_low, abs=0.01)
    assert first[1] == pytest.approx(t_high, abs=0.01)


def test_paired_test_separates_real_from_null_differences() -> None:
    rng = np.random.default_rng(1)
    a = (rng.random(400) < 0.6).astype(float)
    same = paired_test(a, a.copy(), 200, 500, seed=0)
    assert same.p_value == 1.0 and same.difference == 0.0
    better = np.maximum(a, (rng.random(400) < 0.3).astype(float))
    test = paired_test(better, a, 200, 2000, seed=0)
    assert test.difference > 0 and test.low > 0 and test.p_value < 0.01
    noise = (rng.random(400) < 0.6).astype(float)
    assert paired_test(noise, a, 200, 2000, seed=0).p_value > 0.01


def test_chance_flag() -> None:
    assert indistinguishable_from_chance(0.0, 0.0, 0.014) is True
    assert indistinguishable_from_chance(2.0, 5.0, 0.014) is False
    assert indistinguishable_from_chance(10.0, 30.0, 40.0, higher_is_better=False) is False
    assert indistinguishable_from_chance(10.0, 30.0, 20.0, higher_is_better=False) is True
    assert indistinguishable_from_chance(1.0, 2.0, None) is None


def query_ranks(rank_lists: list[tuple[int, ...]], n: int, grades=None) -> QueryRanks:
    rows = [
        {
            "query_id": f"q{q}",
            "rank": rank,
            "n_tied": 0,
            "gallery_size": n,
            "query_group": None,
            "relevance": 1 if grades is None else grades[j],
        }
        for q, ranks in enumerate(rank_lists)
        for j, rank in enumerate(ranks)
    ]
    return QueryRanks.from_table(pl.DataFrame(rows))


@pytest.mark.parametrize("n,r", [(6, 1), (6, 2), (7, 3)])
def test_chance_levels_equal_the_average_over_every_placement(n: int, r: int) -> None:
    """Each metric's chance equals its mean over all placements of r relevant items among n."""
    placements = [tuple(p) for p in itertools.combinations(range(1, n + 1), r)]
    everything = query_ranks(placements, n)
    one = query_ranks([placements[0]], n)
    for name, fn in [
        ("hit@2", lambda q: hit_rate(q, 2)),
        ("recall@3", lambda q: true_recall(q, 3)),
        ("mrr", reciprocal_rank),
        ("rank", first_rank),
        ("ndcg@3", lambda q: ndcg(q, 3)),
        ("ap", lambda q: average_precision(q, None)),
        ("ap@2", lambda q: average_precision(q, 2)),
    ]:
        outcomes, _ = fn(everything)
        _, chance = fn(one)
        assert chance[0] == pytest.approx(outcomes.mean()), name
