# The run's hooks, in one place: what Snakemake calls when the run starts (onstart), when every
# job has succeeded (onsuccess) and when it fails or is interrupted (onerror). Included last:
# they read the plan and the lists of common.smk (PLAN, BENCHMARKS).

from snakemake.logging import logger

from vlbench.paths import COVERAGE_MD, FAILED_RUN_NOTE, NOT_RUN_CSV
from vlbench.planning.failures import (
    failed_job_causes,
    remove_failed_run_note,
    write_failed_run_note,
)
from vlbench.planning.invocation import drop_default_rate_limit
from vlbench.planning.run_end import INTERRUPTED, interrupted, say_last
from vlbench.report.not_run import (
    not_computable_summary,
    not_run_summary,
    read_not_run,
    skipped_images_summary,
)
from vlbench.report.summary import coverage_lines_of


# A local run at Snakemake's default job rate limit runs without it: the limiter's timers wake
# the scheduler more often with every finished job (vlbench.planning.invocation).
onstart:
    drop_default_rate_limit(workflow)


# The end of a run says what the plan left out and which metrics could not be computed
# (not_run.csv lists both), which images a benchmark left out, and how much of each paper table
# it filled (coverage.md).
onsuccess:
    remove_failed_run_note()
    if PLAN.not_run_rows:
        logger.info(not_run_summary(PLAN.not_run_rows, NOT_RUN_CSV))
    for _line in not_computable_summary(read_not_run(NOT_RUN_CSV), NOT_RUN_CSV):
        logger.warning(_line)
    for _line in skipped_images_summary(BENCHMARKS):
        logger.warning(_line)
    for _line in coverage_lines_of(COVERAGE_MD):
        logger.info(_line)


# The last lines of a failed run name each failed job's one-line cause and its log (printed at
# exit, after Snakemake's own lines), and a note beside the tables says they are from an earlier
# run (the next complete run removes it). An interrupted run ends on its one line.
onerror:
    _causes = [INTERRUPTED] if interrupted() else failed_job_causes(log)
    _earlier = write_failed_run_note(_causes)
    if not interrupted():
        say_last(
            [f"vlbench: the tables are from an earlier run ({FAILED_RUN_NOTE})"] * _earlier
            + _causes
        )
