"""Whether a Snakemake process runs jobs, asked of Snakemake's own settings.

Pin on first use resolves unpinned hub downloads only in a run that will download them, so a
dry run (`-n`, `dryrun: true` in a profile, the API's dry-run executor), `--touch`, `--lint`,
`--report`, `--dag`, `--summary` and the other planning commands never ask the hub and never
write the lock file. The question is asked while the DAG is built (from a job parameter), where
Snakemake has set its executor: the planning commands build no DAG or build it without one.
"""

from __future__ import annotations

from typing import Any


def executes_jobs(workflow: Any) -> bool:
    """Whether this is Snakemake's main process running jobs with a real executor.

    `workflow` is the Snakefile's `workflow` object; Snakemake sets its executor plugin only in
    an execution (a dry run gets the dry-run one), and jobs on a cluster node run in a remote
    process, never the main one.
    """
    return bool(
        workflow.is_main_process
        and workflow.executor_plugin is not None
        and not workflow.dryrun
        and not workflow.touch
    )


# Snakemake 9's --max-jobs-per-timespan default, "100/1s" (snakemake/cli.py, group_behavior):
# at most 100 job starts per second.
DEFAULT_RATE_LIMIT = (100, 1.0)


def drop_default_rate_limit(workflow: Any) -> bool:
    """Switch off the job rate limiter of a local run left at Snakemake's default limit.

    Called from the workflow's `onstart` (the scheduler exists, no job has started). The limiter
    arms a timer after every scheduling round and each timer's round arms another, so after n
    finished jobs n timer chains wake the scheduler n times a second, and every round re-reads
    the input sizes of all ready jobs (snakemake/snakemake#3744): rerunning biocap.yaml's 154
    zero-shot evaluations on its fixtures, the main process used 36 CPU-s (6 without). A local
    run submits to no queue, so the default limit protects nothing there. A limit given on the
    command line other than the default, and cluster runs, keep it. Returns whether the limiter
    was switched off.
    """
    settings = workflow.scheduling_settings
    scheduler = getattr(workflow, "scheduler", None)
    limit = None if settings is None else settings.max_jobs_per_timespan
    if not workflow.local_exec or scheduler is None or limit is None:
        return False
    if (limit.max_jobs, float(limit.timespan)) != DEFAULT_RATE_LIMIT:
        return False
    scheduler.job_rate_limiter = None
    return True
