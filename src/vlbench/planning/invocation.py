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
