"""A local run at Snakemake's default job rate limit runs without the limiter (its timers wake
the scheduler more often with every finished job); other limits and cluster runs keep it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from snakemake.cli import get_argument_parser
from snakemake.settings.types import MaxJobsPerTimespan, SchedulingSettings

from vlbench.planning.invocation import DEFAULT_RATE_LIMIT, drop_default_rate_limit


def test_the_default_limit_is_snakemakes_own() -> None:
    limit = get_argument_parser().parse_args([]).max_jobs_per_timespan
    assert (limit.max_jobs, float(limit.timespan)) == DEFAULT_RATE_LIMIT


def snakemake_workflow(limit: str | None, local: bool = True) -> SimpleNamespace:
    """The attributes `drop_default_rate_limit` reads of Snakemake's `workflow` object, with
    Snakemake's own settings."""
    parsed = None if limit is None else MaxJobsPerTimespan.parse_choice(limit)
    return SimpleNamespace(
        local_exec=local,
        scheduling_settings=SchedulingSettings(max_jobs_per_timespan=parsed),
        scheduler=SimpleNamespace(job_rate_limiter="limiter"),
    )


@pytest.mark.parametrize(
    ("limit", "local", "dropped"),
    [
        ("100/1s", True, True),
        ("50/1s", True, False),
        ("100/1m", True, False),
        ("100/1s", False, False),  # a cluster run: the limit spares the queue
        (None, True, False),
    ],
)
def test_only_a_local_run_at_the_default_limit_drops_it(limit, local: bool, dropped: bool):
    workflow = snakemake_workflow(limit, local)
    assert drop_default_rate_limit(workflow) is dropped
    assert (workflow.scheduler.job_rate_limiter is None) is dropped
