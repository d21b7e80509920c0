"""A disk that fills up at each stage of a run: each time the run stops on one line naming the
file it could not write and leaves nothing that looks finished; with the space back, the same
command goes on, and the finished run has the clean run's bytes.

One run, advanced a stage at a time as a user would: the folder the next stage writes is a full
file system (a tmpfs filled to its last block) for one invocation, then space is freed (the
tmpfs is unmounted) and the next invocation meets the next full folder. The random checkpoint
(written by torch.save, whose own error says only "file write failed"), the prepared parquet,
the embedding shards, the evaluation and the tables each meet one. (The pixel cache on a full
disk: tests/embedding/test_pixel_cache.py, on a real full file system too.)
"""

from __future__ import annotations

from pathlib import Path

from small_disks import files_on, small_disk
from stored_files import files_under
from workflow_helpers import run_in_own_session, write_shared_demo

# (folder that is full, the rules one of which fails on it first), in the order a run reaches
# them. The embeddings folder holds the embed job's stored shards and the models' identity
# files, written by two jobs that may start in either order.
STAGES = [
    ("results/checkpoints", ("init_random_checkpoint",)),
    ("results/data", ("prepare_benchmark",)),
    ("results/embeddings", ("embed", "embedding_identity")),
    ("results/ranks", ("evaluate_paired",)),
    ("results/tables", ("tables",)),
]


def test_a_full_disk_at_each_stage_stops_on_one_line_and_the_same_command_resumes(
    demo_run: Path, tmp_path: Path
) -> None:
    workdir = tmp_path / "run"
    workdir.mkdir()
    write_shared_demo(workdir)
    for folder, rules in STAGES:
        with small_disk(workdir / folder, "64k", full=True) as full:
            stopped = run_in_own_session(workdir)
            left = files_on(full)
        said = stopped.stdout + stopped.stderr
        assert stopped.returncode == 1, f"{folder}: the run did not stop\n{said[-3000:]}"
        cause = stopped.stderr.strip().splitlines()[-1]
        assert any(
            cause.startswith(f"vlbench: {rule} failed: no space left on device for {folder}/")
            for rule in rules
        ), cause
        assert "(log: logs/" in cause
        assert "Traceback" not in cause
        # Nothing on the full disk looks finished: no output, no partial file.
        assert left == [], f"{folder}: left on the full disk: {left}"
    resumed = run_in_own_session(workdir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    clean, after = files_under(demo_run), files_under(workdir)
    assert sorted(after) == sorted(clean)
    assert [name for name in clean if clean[name] != after[name]] == []
    assert list((workdir / "results").rglob("*.partial")) == []
