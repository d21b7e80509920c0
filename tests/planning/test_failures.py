"""The end of a failed run names each failed job's cause, read back from the run's logs."""

from __future__ import annotations

from pathlib import Path

from vlbench.planning.failures import failed_job_causes

RUN_LOG = """Building DAG of jobs...
Error in rule evaluate_paired:
    message: None
    jobid: 2
    output: results/index/tiny/demo/text.faiss
    log: {first} (check log file(s) for error details)
Error in rule embed:
    jobid: 3
    log: {second} (check log file(s) for error details)
Error in rule fewshot:
    jobid: 4
    log: {third} (check log file(s) for error details)
WorkflowError:
At least one job did not complete successfully.
"""


def test_each_failed_job_gets_its_cause_and_log(tmp_path: Path) -> None:
    first, second, third = (tmp_path / name for name in ("a.log", "b.log", "c.log"))
    first.write_text("2026 INFO pid 1\nERROR: results/x.npy: its bytes do not match\n")
    second.write_text("Traceback (most recent call last):\n  ...\nMemoryError\n")
    run_log = tmp_path / "run.log"
    run_log.write_text(RUN_LOG.format(first=first, second=second, third=third))
    assert failed_job_causes(run_log) == [
        f"vlbench: evaluate_paired failed: results/x.npy: its bytes do not match (log: {first})",
        f"vlbench: embed failed: MemoryError (log: {second})",
        f"vlbench: fewshot failed: its log was not written (log: {third})",
    ]
    assert failed_job_causes([run_log]) == failed_job_causes(run_log)  # Snakemake hands a list
    assert failed_job_causes(tmp_path / "absent.log") == [] == failed_job_causes(None)
