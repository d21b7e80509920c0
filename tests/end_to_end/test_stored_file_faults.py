"""The stored files of a finished run, damaged or deleted, as the next runs see them.

On copies of the shared demo run: a damaged gathered matrix stops the evaluation that reads it
with a line naming the file and `vlbench clean`, the run's last lines say so, the tables stay as
they were (never a changed table with exit 0), and `vlbench clean` plus the same command gives
the clean run's bytes back; a deleted embeddings folder is what `vlbench clean` is for
(Snakemake alone sees nothing to do). Every stored kind (shards, pixel arrays, gathered matrices
and ids, indexes) is damaged both ways, flipped and truncated, in the fast tests of
tests/embedding/test_stored_file_digests.py: a stored shard or pixel array is recomputed to the
same bytes, the others stop their reader.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from stored_files import DAMAGES, files_under
from workflow_helpers import copy_of_run, run_in_own_session

MODEL, BENCHMARK = "tiny", "demo"  # the shared demo's (workflow_helpers.write_shared_demo)
EMBEDDINGS = Path("results/embeddings") / MODEL / BENCHMARK


def vlbench_clean(workdir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vlbench.cli", "clean", MODEL, BENCHMARK],
        cwd=workdir,
        capture_output=True,
        text=True,
    )


def test_a_damaged_gathered_file_stops_the_run_naming_it_and_clean_restores_it(
    demo_run: Path, tmp_path: Path
) -> None:
    """(Truncated ids and the other gathered files: tests/embedding/test_stored_file_digests.py.)"""
    workdir = copy_of_run(demo_run, tmp_path)
    before = files_under(demo_run)
    damaged = "image.npy"
    DAMAGES["flipped"](workdir / EMBEDDINGS / damaged)  # newer now: the evaluation reads it
    failed = run_in_own_session(workdir)
    assert failed.returncode != 0
    output = failed.stdout + failed.stderr
    assert f"{EMBEDDINGS / damaged}: its bytes do not match the xxh3_128 digest" in output
    assert f"`vlbench clean {MODEL} {BENCHMARK}`" in output
    # The run's last lines, after Snakemake's own, say the tables are old and name the failed
    # job's cause and its log.
    *_, old_tables, cause = failed.stderr.strip().splitlines()
    assert (
        old_tables
        == "vlbench: the tables are from an earlier run (results/tables/LAST_RUN_FAILED.md)"
    )
    assert cause.startswith(f"vlbench: evaluate_paired failed: {EMBEDDINGS / damaged}: its bytes")
    assert cause.endswith(f"(log: logs/evaluate/{MODEL}/{BENCHMARK}.log)")
    tables = {name: data for name, data in before.items() if name.startswith("results/tables")}
    assert {name: files_under(workdir)[name] for name in tables} == tables  # never changed
    note = (workdir / "results" / "tables" / "LAST_RUN_FAILED.md").read_text(encoding="utf-8")
    assert "the tables in this folder are from an earlier run" in note
    assert f"vlbench: evaluate_paired failed: {EMBEDDINGS / damaged}" in note
    cleaned = vlbench_clean(workdir)
    assert cleaned.returncode == 0, cleaned.stderr
    assert f"removed results/embeddings/{MODEL}/{BENCHMARK}" in cleaned.stdout
    rerun = run_in_own_session(workdir)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert files_under(workdir) == before  # the note is gone with the complete run


def test_a_deleted_embeddings_folder_is_planned_again_after_vlbench_clean(
    demo_run: Path, tmp_path: Path
) -> None:
    """The run after `vlbench clean` is the previous test's; here its plan, from a folder the
    user deleted by hand."""
    workdir = copy_of_run(demo_run, tmp_path)
    shutil.rmtree(workdir / EMBEDDINGS)
    # Snakemake alone: the metric files and tables are up to date, nothing needs the folder.
    dry = run_in_own_session(workdir, "--dry-run")
    assert "Nothing to be done" in dry.stdout + dry.stderr
    cleaned = vlbench_clean(workdir)
    assert cleaned.returncode == 0, cleaned.stderr
    planned = run_in_own_session(workdir, "--dry-run", "--quiet", "rules")
    assert planned.returncode == 0, planned.stderr[-2000:]
    for rule in ("embed", "evaluate_paired", "tables"):
        assert rule in planned.stdout, planned.stdout
    again = vlbench_clean(tmp_path)  # no results/ there
    assert again.returncode == 1 and f"nothing of {MODEL}/{BENCHMARK}" in again.stderr
