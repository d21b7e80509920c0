"""Intervals, paired tests and chance levels (the latter by exhaustive enumeration)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

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
    all_paired_tests,
    bootstrap_interval,
    indistinguishable_from_chance,
    paired_test,
    t_interval,
    wilson_low,
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


# A fresh process, as a job is: its t intervals load scipy's `stdtrit` without scipy.special's
# package, and a later `import scipy.stats` (which imports that package) works and gives the
# same bits.
FRESH_PROCESS_INTERVALS = """
import sys
import numpy as np
from vlbench.metrics.statistics import t_interval
values = (np.random.default_rng(7).random(300) < 0.4).astype(float)
ours = [t_interval(values, c) for c in (0.9, 0.95, 0.99)]
assert "scipy.special" not in sys.modules, "scipy.special's package was imported"
assert "scipy.special._ufuncs" in sys.modules
from scipy import stats
theirs = [
    tuple(float(b) for b in stats.t.interval(c, 299, loc=values.mean(), scale=stats.sem(values)))
    for c in (0.9, 0.95, 0.99)
]
assert ours == theirs, (ours, theirs)
from scipy.special import stdtrit, expit
assert stdtrit(299, 0.975) == stats.t.ppf(0.975, 299) and expit(0.0) == 0.5
print("ok")
"""


def test_a_jobs_t_intervals_load_no_scipy_special_package_and_equal_scipy_stats() -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS_INTERVALS], capture_output=True, text=True
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


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


@pytest.mark.parametrize("kind", ["hits", "graded", "ties"])
def test_all_pairs_in_one_pass_equal_each_pair_tested_alone(kind: str) -> None:
    rng = np.random.default_rng(7)
    if kind == "hits":  # Recall@k: 0/1 outcomes, many permuted means equal to the observed one
        outcomes = (rng.random((6, 150)) < rng.random((6, 1))).astype(float)
    elif kind == "graded":  # AP, nDCG
        outcomes = rng.random((6, 150)) ** 3
    else:  # two identical models and a constant one
        base = (rng.random(150) < 0.5).astype(float)
        outcomes = np.vstack([base, base, np.ones(150), (rng.random(150) < 0.4).astype(float)])
    together = all_paired_tests(outcomes, 300, 700, seed=3, confidence=0.9)
    assert sorted(together) == [
        (i, j) for i in range(len(outcomes)) for j in range(i + 1, len(outcomes))
    ]
    for (i, j), test in together.items():
        alone = paired_test(outcomes[i], outcomes[j], 300, 700, seed=3, confidence=0.9)
        assert test.p_value == alone.p_value, (i, j)
        assert test.n_queries == alone.n_queries
        ours = (test.difference, test.low, test.high)
        theirs = (alone.difference, alone.low, alone.high)
        assert ours == pytest.approx(theirs, abs=1e-12), (i, j)


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


def test_paired_rows_test_every_pair_on_the_common_queries(tmp_path) -> None:
    """Outcome files as the evaluation writes them (rows in another order for one model): one
    pass for all pairs when the models share their queries, pair by pair when they do not; both
    equal `paired_test` on the queries aligned."""
    import polars as pl

    from vlbench.metrics.rows import StatsSettings, paired_rows

    rng = np.random.default_rng(11)
    queries = [f"q{i}" for i in range(80)]
    hits = {
        m: (rng.random(80) < p).astype(float) * 100
        for m, p in zip("abc", (0.3, 0.5, 0.7), strict=True)
    }
    files = []
    for model, values in hits.items():
        order = np.arange(80)[::-1] if model == "b" else np.arange(80)
        frame = pl.DataFrame(
            {
                "benchmark": "bench",
                "subset": "test",
                "direction": "image_to_text",
                "model": model,
                "metric": "recall",
                "k": pl.Series([1] * 80, dtype=pl.Int64),
                "statistic": "mean",
                "query_id": [queries[i] for i in order],
                "outcome": values[order],
            }
        )
        files.append(tmp_path / f"{model}.parquet")
        frame.write_parquet(files[-1])
    settings = StatsSettings.from_config({"permutation_samples": 500, "bootstrap_samples": 200})
    rows = paired_rows(files, settings)
    assert rows.select("model_a", "model_b").rows() == [("a", "b"), ("a", "c"), ("b", "c")]
    for row in rows.iter_rows(named=True):
        alone = paired_test(
            hits[row["model_a"]],
            hits[row["model_b"]],
            settings.bootstrap_samples,
            settings.permutation_samples,
            settings.seed,
            settings.confidence,
        )
        assert row["p_value"] == alone.p_value and row["n_queries"] == 80
        assert (row["difference"], row["diff_low"], row["diff_high"]) == pytest.approx(
            (alone.difference, alone.low, alone.high), abs=1e-9
        )
    # A model without one of the queries: its pairs are on the queries both have.
    pl.read_parquet(files[2]).filter(pl.col("query_id") != "q5").write_parquet(files[2])
    partial = paired_rows(files, settings).filter(pl.col("model_b") == "c")
    assert partial["n_queries"].to_list() == [79, 79]
    keep = np.array([q != "q5" for q in queries])
    alone = paired_test(
        hits["a"][keep], hits["c"][keep], 200, 500, settings.seed, settings.confidence
    )
    assert partial["p_value"][0] == alone.p_value


@pytest.mark.parametrize("n,r,k", [(100_000, 3, 10), (1_000, 50, 100), (20, 19, 1), (5_000, 1, 5)])
def test_chance_levels_of_large_galleries_equal_exact_binomial_arithmetic(n, r, k) -> None:
    """Hit-rate and MRR chance on galleries too large to enumerate, against integer arithmetic
    (`math.comb`; fractions, and for MRR's sum each term floored at 10^-40 of its scale)."""
    one = query_ranks([tuple(range(1, r + 1))], n)
    exact_hit = 1 - Fraction(math.comb(n - r, k), math.comb(n, k))
    assert hit_rate(one, k)[1][0] == pytest.approx(float(exact_hit), rel=1e-12, abs=1e-15)
    # P(first relevant item at position j) = C(n - j, r - 1) / C(n, r).
    # Summed as integers scaled by 10^40 (a Fraction sum's denominators grow like lcm(1..n)).
    scale = 10**40
    scaled = sum(math.comb(n - j, r - 1) * scale // j for j in range(1, n - r + 2))
    exact_mrr = scaled / (math.comb(n, r) * scale)
    assert reciprocal_rank(one)[1][0] == pytest.approx(exact_mrr, rel=1e-10)


@pytest.mark.parametrize(("percent", "n"), [(13.017, 7185), (0.5, 300), (50.0, 40), (0.0, 100)])
def test_wilson_bound_matches_scipy(percent: float, n: int) -> None:
    successes = round(percent / 100 * n)
    expected = stats.binomtest(successes, n).proportion_ci(method="wilson").low
    assert wilson_low(100 * successes / n, n) == pytest.approx(100 * expected, abs=1e-9)
