"""embedding.jobs: auto picks the cut for where the jobs run; an explicit choice wins."""

from __future__ import annotations

import pytest

from vlbench.config import EMBED_JOB_SHAPES, EMBED_JOB_WILDCARDS
from vlbench.planning.embed_cut import choose_cut


@pytest.mark.parametrize(
    ("cluster", "gpus", "expected"),
    [
        (False, 1, "single"),
        (False, 2, "per_model"),
        (False, 8, "per_model"),
        (True, 1, "per_benchmark"),
        (True, 4, "per_benchmark"),
    ],
)
def test_auto_picks_by_where_the_jobs_run(cluster: bool, gpus: int, expected: str) -> None:
    cut = choose_cut("auto", cluster, gpus)
    assert cut.jobs == expected
    assert cut.line().startswith(f"vlbench embedding jobs: {expected} (auto: ")


@pytest.mark.parametrize("configured", sorted(EMBED_JOB_WILDCARDS))
@pytest.mark.parametrize(("cluster", "gpus"), [(False, 1), (False, 2), (True, 1)])
def test_an_explicit_cut_wins_everywhere(configured: str, cluster: bool, gpus: int) -> None:
    cut = choose_cut(configured, cluster, gpus)
    assert (cut.jobs, cut.reason) == (configured, "embedding.jobs")


def test_every_choice_resolves_to_a_cut_with_wildcards() -> None:
    assert set(EMBED_JOB_SHAPES) == {"auto", *EMBED_JOB_WILDCARDS}
    for configured in EMBED_JOB_SHAPES:
        for cluster in (False, True):
            for gpus in (1, 2):
                assert choose_cut(configured, cluster, gpus).jobs in EMBED_JOB_WILDCARDS
