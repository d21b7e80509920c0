"""Standings: Holm against statsmodels, the one-sided test against scipy's exact permutation
test, rank intervals against scipy's ranking of the same resamples, and the table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from vlbench.metrics.rows import StatsSettings
from vlbench.metrics.standings import (
    column_standings,
    competition_ranks,
    holm_adjusted,
    standings_table,
)
from vlbench.metrics.statistics import resampled_means


@pytest.mark.parametrize("seed", range(6))
def test_holm_equals_statsmodels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 0.2, size=int(rng.integers(1, 12)))
    p[: len(p) // 3] = p[0]  # ties
    reject, corrected, _, _ = multipletests(p, alpha=0.05, method="holm")
    assert holm_adjusted(p) == pytest.approx(corrected, abs=1e-15)
    assert list(holm_adjusted(p) <= 0.05) == list(reject)


def _exact_one_sided(best: np.ndarray, other: np.ndarray) -> float:
    """scipy's exact paired permutation p-value of mean(best - other) > 0."""
    result = stats.permutation_test(
        (best, other),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        alternative="greater",
        n_resamples=np.inf,
    )
    return float(result.pvalue)


def test_one_sided_p_values_match_scipys_exact_permutation_test() -> None:
    rng = np.random.default_rng(3)
    best = rng.integers(0, 2, size=12).astype(float)
    best[:6] = 1.0
    others = [
        np.where(rng.uniform(size=12) < 0.3, 0.0, best),  # a few queries lost
        np.where(rng.uniform(size=12) < 0.7, 0.0, best),  # many lost
        rng.permutation(best),  # same mean
    ]
    outcomes = np.vstack([best, *others]) * 100
    standings = column_standings(["a", "b", "c", "d"], outcomes, True, 0.95, 200, 200_000, seed=1)
    assert standings[0].p_worse is None and standings[0].tied_with_best
    for standing, other in zip(standings[1:], others, strict=True):
        exact = _exact_one_sided(best, other) if np.any(best != other) else 1.0
        # Monte Carlo with 200,000 flips: within a few standard errors of the exact value.
        assert standing.p_worse == pytest.approx(exact, abs=0.005)
    p = [s.p_worse for s in standings[1:]]
    _, corrected, _, _ = multipletests(p, alpha=0.05, method="holm")
    assert [s.p_holm for s in standings[1:]] == pytest.approx(corrected)
    assert [s.tied_with_best for s in standings[1:]] == list(corrected > 0.05)


def test_a_clearly_worse_model_is_not_tied_and_an_equal_one_is() -> None:
    rng = np.random.default_rng(0)
    best = (rng.uniform(size=400) < 0.8).astype(float)
    worse = best * (rng.uniform(size=400) < 0.5)
    standings = column_standings(["best", "copy", "worse"], np.vstack([best, best, worse]),
                                 True, 0.95, 100, 2000, seed=0)  # fmt: skip
    assert [s.tied_with_best for s in standings] == [True, True, False]
    assert [s.rank for s in standings] == [1, 1, 3]
    assert standings[1].p_worse == 1.0


def test_lower_is_better_for_rank_metrics() -> None:
    ranks = np.array([[1.0, 2, 1, 3, 1, 1] * 20, [5.0, 9, 4, 8, 7, 6] * 20])
    standings = column_standings(["low", "high"], ranks, False, 0.95, 100, 2000, seed=0)
    assert (standings[0].rank, standings[1].rank) == (1, 2)
    assert standings[0].p_worse is None and not standings[1].tied_with_best


def test_rank_intervals_are_scipys_ranks_of_the_same_resamples() -> None:
    rng = np.random.default_rng(7)
    outcomes = (rng.uniform(size=(5, 60)) < np.linspace(0.3, 0.6, 5)[:, None]).astype(float)
    standings = column_standings(list("abcde"), outcomes, True, 0.9, 500, 100, seed=11)
    means = resampled_means(outcomes, 500, 11)  # the draws the standings are built on
    ranks = np.column_stack([stats.rankdata(-means[:, s], method="min") for s in range(500)])
    for index, standing in enumerate(standings):
        ordered = np.sort(ranks[index])
        low = ordered[int(np.ceil(0.05 * 500)) - 1]  # inverted CDF at 0.05
        high = ordered[int(np.ceil(0.95 * 500)) - 1]
        assert (standing.rank_low, standing.rank_high) == (low, high)
        assert standing.rank_low <= standing.rank <= standing.rank_high
    assert competition_ranks(np.array([[2.0], [3.0], [2.0]]))[:, 0].tolist() == [2, 1, 2]


def _outcome_file(path: Path, model: str, outcomes: list[float], groups: list[str]) -> str:
    pl.DataFrame(
        {
            "benchmark": "bench",
            "subset": "test",
            "model": model,
            "direction": "text_to_image",
            "metric": "recall",
            "k": pl.Series([1] * len(outcomes), dtype=pl.Int64),
            "unit": "percent",
            "statistic": "mean",
            "query_id": [f"q{i}" for i in range(len(outcomes))],
            "query_group": groups,
            "outcome": outcomes,
            "chance": 1.0,
            "tied": False,
        }
    ).write_parquet(path)
    return str(path)


def test_table_has_a_column_per_query_group_the_metric_tables_report(tmp_path: Path) -> None:
    groups = ["g1", "g2"] * 20
    files = [
        _outcome_file(tmp_path / "a.parquet", "a", [100.0] * 40, groups),
        _outcome_file(tmp_path / "b.parquet", "b", [0.0, 100.0] * 20, groups),
    ]
    settings = StatsSettings(0.95, 100, 1000, 0)
    table = standings_table(files, settings, subsets={("bench", "test"), ("bench", "g1")})
    by_subset = {subset: frame.sort("model") for (subset,), frame in table.group_by(["subset"])}
    assert set(by_subset) == {"test", "g1"}  # g2 is not a subset of the metric tables
    assert by_subset["g1"]["tied_with_best"].to_list() == [True, False]  # b misses all of g1
    assert by_subset["test"]["best_model"].to_list() == ["a", "a"]
    assert by_subset["test"]["n_queries"].to_list() == [40, 40]
    assert by_subset["g1"]["n_queries"].to_list() == [20, 20]


def test_columns_sharing_their_draws_stand_as_each_would_alone(tmp_path: Path) -> None:
    """The table draws the resamples and flips once per query count for all its columns; each
    column's standings equal `column_standings` drawing its own."""
    rng = np.random.default_rng(3)
    settings = StatsSettings(0.9, 150, 700, 5)
    columns = {  # (direction, k): queries
        ("text_to_image", 1): 30,
        ("text_to_image", 5): 30,
        ("image_to_text", 1): 45,
        ("image_to_text", 5): 45,
    }
    frames, expected = [], {}
    for (direction, k), queries in columns.items():
        outcomes = (rng.random((3, queries)) < [[0.3], [0.5], [0.55]]) * 100.0
        for model, row in zip("abc", outcomes, strict=True):
            frames.append(
                pl.DataFrame(
                    {
                        "benchmark": "bench",
                        "subset": "test",
                        "model": model,
                        "direction": direction,
                        "metric": "recall",
                        "k": pl.Series([k] * queries, dtype=pl.Int64),
                        "unit": "percent",
                        "statistic": "mean",
                        "query_id": [f"q{i}" for i in range(queries)],
                        "query_group": [None] * queries,
                        "outcome": row,
                    }
                )
            )
        expected[direction, k] = column_standings(
            list("abc"), outcomes, True, 0.9, 150, 700, seed=5
        )
    path = tmp_path / "outcomes.parquet"
    pl.concat(frames, how="diagonal_relaxed").write_parquet(path)
    table = standings_table([path], settings)
    for (direction, k), standings in expected.items():
        got = table.filter((pl.col("direction") == direction) & (pl.col("k") == k)).sort("model")
        for field in ("rank", "rank_low", "rank_high", "p_worse", "p_holm", "tied_with_best"):
            assert got[field].to_list() == [getattr(s, field) for s in standings], field
