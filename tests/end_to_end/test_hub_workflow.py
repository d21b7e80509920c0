"""The whole workflow against a loopback hub: pinned on first use, then locked for good."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from loopback_hub import LoopbackHub
from workflow_helpers import SNAKEFILE, TINY_MODEL_CONFIG, run_workflow, write_config

from vlbench.data.synthetic import write_synthetic_biomedflickr
from vlbench.planning.lockfile import read_lock

MODEL, DATASET = "org/tiny-clip", "org/tiny-flickr"


def write_model_repo(folder: Path, seed: int) -> Path:
    """A tiny open_clip model in the hub layout (config + seeded random weights)."""
    import open_clip

    model_cfg = json.loads(TINY_MODEL_CONFIG.read_text(encoding="utf-8"))
    folder.mkdir(parents=True)
    (folder / "open_clip_config.json").write_text(
        json.dumps({"model_cfg": model_cfg, "preprocess_cfg": {}}), encoding="utf-8"
    )
    torch.manual_seed(seed)
    torch.save(open_clip.CLIP(**model_cfg).state_dict(), folder / "open_clip_pytorch_model.bin")
    return folder


def publish(hub: LoopbackHub, tmp_path: Path, seed: int) -> tuple[str, str]:
    """Commit a version of the model and the dataset repository; their branches move there."""
    model = write_model_repo(tmp_path / f"model-{seed}", seed)
    data = tmp_path / f"data-{seed}"
    write_synthetic_biomedflickr(data, pairs=6, seed=seed)
    return hub.commit_folder("model", MODEL, model), hub.commit_folder("dataset", DATASET, data)


def hubbed_config(workdir: Path) -> Path:
    """A config of one unpinned hub model on one unpinned hub dataset."""
    workdir.mkdir()
    return write_config(
        workdir,
        {
            "models": {"tiny-hub": {"name": f"hf-hub:{MODEL}"}},
            "benchmarks": {
                "tiny-flickr": {"protocol": "paired", "source": {"repo": DATASET}, "k": [1, 5]}
            },
            "metrics": {"bootstrap_samples": 0},
            "tables": {"qualitative_queries": 0},
        },
        "hubbed.yaml",
    )


# A dry run through Snakemake's Python API, as a program driving the workflow would make it.
API_DRY_RUN = """
import sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

snakefile, workdir, configfile = map(Path, sys.argv[1:])
with SnakemakeApi(OutputSettings()) as api:
    workflow = api.workflow(
        snakefile=snakefile,
        workdir=workdir,
        resource_settings=ResourceSettings(cores=1),
        config_settings=ConfigSettings(configfiles=[configfile]),
    )
    workflow.dag().execute_workflow(executor="dryrun")
"""


def test_plan_only_invocations_neither_ask_the_hub_nor_write_the_lock(
    tmp_path: Path, loopback_hub: LoopbackHub
) -> None:
    """Snakemake's settings, not its command line, say when a plan only plans: `-n`, a
    profile that sets `dryrun: true`, the Python API's dry run, --lint and --dag."""
    publish(loopback_hub, tmp_path, seed=1)
    workdir = tmp_path / "work"
    config = hubbed_config(workdir)
    profile = tmp_path / "dry-profile"
    profile.mkdir()
    (profile / "config.yaml").write_text("dryrun: true\n", encoding="utf-8")
    asked = len(loopback_hub.requests)
    for extra in (("-n",), ("--workflow-profile", str(profile)), ("--lint",), ("--dag",)):
        result = run_workflow(workdir, config, *extra, check=False)
        assert result.returncode == 0, (extra, result.stderr[-3000:])
        assert "will pin on first use" in result.stdout + result.stderr, extra
    api = subprocess.run(
        [sys.executable, "-c", API_DRY_RUN, str(SNAKEFILE), str(workdir), str(config)],
        capture_output=True,
        text=True,
        cwd=workdir,
    )
    assert api.returncode == 0, api.stderr[-3000:]
    assert "embed" in api.stdout + api.stderr  # the dry run planned the jobs
    assert not (workdir / "hubbed.lock").exists()
    assert loopback_hub.requests[asked:] == []


def test_first_run_locks_and_a_moved_branch_changes_nothing(
    tmp_path: Path, loopback_hub: LoopbackHub
) -> None:
    model_sha, data_sha = publish(loopback_hub, tmp_path, seed=1)
    workdir = tmp_path / "work"
    config = hubbed_config(workdir)

    first = run_workflow(workdir, config)
    lock = workdir / "hubbed.lock"
    pins = read_lock(lock)
    assert {key: pin.commit for key, pin in pins.items()} == {
        f"model {MODEL}": model_sha,
        f"dataset {DATASET}": data_sha,
    }
    assert f"pinned model {MODEL} to {model_sha}" in first.stderr
    benchmark = json.loads((workdir / "results/data/tiny-flickr/benchmark.json").read_text())
    assert benchmark["repo"] == DATASET and benchmark["revision"] == data_sha
    stem = workdir / "results/embeddings/tiny-hub/tiny-flickr"
    provenance = json.loads((stem / "image.json").read_text())
    assert model_sha in json.dumps(provenance)
    assert (workdir / "results/tables/metrics.csv").is_file()

    # The branches move on; the lock keeps both where they were, and nothing reruns.
    moved = publish(loopback_hub, tmp_path, seed=2)
    assert moved != (model_sha, data_sha)
    asked = len(loopback_hub.requests)
    locked_text = lock.read_text()
    for extra in (("-n",), ()):
        result = run_workflow(workdir, config, *extra)
        assert "Nothing to be done" in result.stdout + result.stderr, result.stderr[-3000:]
    assert lock.read_text() == locked_text
    assert loopback_hub.requests[asked:] == []  # the hub was not even asked
    (row,) = [line for line in result.stderr.splitlines() if line.startswith("  model ")]
    assert row.split()[1:3] == ["tiny-hub", "locked"] and f"{MODEL} @ {model_sha[:12]}" in row
