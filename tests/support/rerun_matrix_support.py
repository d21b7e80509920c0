"""A finished workflow run over every kind of user-supplied input, and a dry-run job reader.

The rerun matrix (tests/end_to_end/test_rerun_matrix.py) copies the finished run, applies one
edit and asks Snakemake which jobs a dry run schedules.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fixtures_sources import write_annotation_pairs
from workflow_helpers import (
    REPO,
    TINY_MODEL_CONFIG,
    copy_of_run,
    dry_runs,
    run_workflow,
    succeeded,
    write_config,
)

from vlbench.data.synthetic import write_synthetic_biomedflickr
from vlbench.embedding.models import write_random_checkpoint

MODEL_A = "models/a/vlbench-tiny.json"
MODEL_B = "models/b/vlbench-tiny.json"
CHECKPOINT = "models/b/weights.pt"
REFERENCE_CSV = "reference/published.csv"
REFERENCE_MAP = "reference/map.yaml"


def matrix_config() -> dict[str, Any]:
    """Two models (a rule-made random checkpoint, a local checkpoint file), two local benchmarks
    (hub-layout parquet; annotation CSV + image folder), a paper table from local reference files.

    Every path is relative, so a copy of the working directory is a complete run of its own.
    """
    return {
        "models": {
            "tiny": {"name": "vlbench-tiny", "model_config": MODEL_A, "random_init_seed": 0},
            "local": {"name": "vlbench-tiny", "model_config": MODEL_B, "pretrained": CHECKPOINT},
        },
        "benchmarks": {
            "pairs": {"protocol": "paired", "source": {"path": "data/pairs"}, "k": [1, 5]},
            "birds": {
                "protocol": "paired",
                "source": {
                    "path": "data/birds",
                    "format": "annotation_csv",
                    "annotations": "annotations.csv",
                    "images": "images",
                },
                "k": [1, 5],
            },
        },
        "embedding": {"shard_size": 1000, "batch_size": 16},
        "metrics": {"bootstrap_samples": 20, "permutation_samples": 50},
        "tables": {
            "reference": REFERENCE_CSV,
            "map": REFERENCE_MAP,
            "qualitative_queries": 0,
        },
    }


def write_inputs(workdir: Path) -> None:
    """The user-supplied files of `matrix_config`, in the real layouts."""
    for config_path in (MODEL_A, MODEL_B):
        (workdir / config_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(TINY_MODEL_CONFIG, workdir / config_path)
    write_random_checkpoint("vlbench-tiny", workdir / MODEL_B, 7, workdir / CHECKPOINT)
    write_synthetic_biomedflickr(workdir / "data" / "pairs", 24, 3, "test")
    write_annotation_pairs(workdir / "data" / "birds", n=12)
    (workdir / "reference").mkdir()
    shutil.copyfile(
        REPO / "config" / "reference" / "published_results.csv", workdir / REFERENCE_CSV
    )
    (workdir / REFERENCE_MAP).write_text(
        "models:\n  tiny: [tiny-random]\n"
        "benchmarks:\n  pairs: {reference: biomedflickr, published: false}\n",
        encoding="utf-8",
    )


def finished_run(workdir: Path) -> Path:
    """Write the inputs and config into `workdir` and run the workflow to the end."""
    workdir.mkdir(parents=True, exist_ok=True)
    write_inputs(workdir)
    write_config(workdir, matrix_config())
    run_workflow(workdir, workdir / "config.yaml", "--cores", "2")
    return workdir


_JOB = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")


def jobs_in_log(text: str) -> set[str]:
    """The jobs a Snakemake log lists (a dry run's plan, or the jobs a run started), as 'rule'
    or 'rule[name=value,...]' (wildcards sorted); the `all` target is left out."""
    jobs: set[str] = set()
    rule = None
    wildcards = ""
    for line in [*text.splitlines(), ""]:
        stripped = line.strip()
        match = _JOB.match(stripped)
        if match or not stripped:
            if rule is not None:
                jobs.add(f"{rule}[{wildcards}]" if wildcards else rule)
            rule, wildcards = (match.group(1), "") if match else (None, "")
        elif rule is not None and stripped.startswith("wildcards:"):
            pairs = sorted(part.strip() for part in stripped.removeprefix("wildcards:").split(","))
            wildcards = ",".join(pairs)
    jobs.discard("all")
    return jobs


def scheduled_jobs(workdir: Path, *extra: str) -> set[str]:
    """The jobs a dry run schedules, as `jobs_in_log` writes them."""
    result = run_workflow(workdir, workdir / "config.yaml", "--dry-run", *extra)
    return jobs_in_log(result.stdout)


def planned(result: subprocess.CompletedProcess) -> set[str]:
    """The jobs of a finished dry run (`dry_runs`), which must have succeeded."""
    return jobs_in_log(succeeded(result).stdout)


def edited_copies(
    run: Path, edits: Mapping[str, Callable[[Path], None]], folder: Path
) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """Each edit applied to its own copy of the finished `run` (under `folder`), with the dry
    run of the copy: all dry runs in one batch (`dry_runs`), which imports Snakemake once."""
    copies = {}
    for number, (name, apply) in enumerate(edits.items()):
        copies[name] = copy_of_run(run, folder / str(number))
        apply(copies[name])
    results = dry_runs(list(copies.values()))
    return {name: (copies[name], result) for name, result in zip(copies, results, strict=True)}
