"""How the embedding work is cut into jobs (`embedding.jobs`), decided where the run executes.

`auto` (the default) picks the fastest cut for where the jobs run:

* **one machine, one GPU slot** (`--cores N`, the default profile's `gpu: 1`): `single`, one job
  for every model on every benchmark: torch and open_clip are imported once, each image is
  decoded once (the pixel cache), each model loaded once in turn;
* **one machine, several GPU slots** (`--resources gpu=N`, N > 1): `per_model`, so N models
  embed at once, each job on a GPU of its own;
* **a cluster** (the jobs are submitted by an executor plugin such as SLURM): `per_benchmark`,
  one job per (model, benchmark), the most parallel cut.

A cluster run is planned twice, on the submitting host and inside each job, and both must plan
the same cut, or a job would not find itself in its own DAG. Both decide from what each sees of
Snakemake's settings before the Snakefile is read: the submitting host was given `--jobs`
(Snakemake requires it with any cluster executor and folds it into `--cores` for a local run),
and every cluster job runs in Snakemake's remote mode. An explicit `embedding.jobs` wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from snakemake_interface_executor_plugins.settings import ExecMode


@dataclass(frozen=True)
class EmbedCut:
    """The cut a run uses and why (one line the run prints)."""

    jobs: str
    reason: str

    def line(self) -> str:
        return f"vlbench embedding jobs: {self.jobs} ({self.reason})"


def submits_to_cluster(workflow: Any) -> bool:
    """Whether this Snakemake process plans a run whose jobs run on a cluster: a job of one
    (remote mode), or the host that submits them (given `--jobs`, which only a cluster executor
    keeps as such)."""
    return workflow.exec_mode == ExecMode.REMOTE or workflow.resource_settings.nodes is not None


def gpu_slots(workflow: Any) -> int:
    """The GPU slots the run allows at once (`--resources gpu=N`; 1 when not given)."""
    resource = workflow.global_resources.get("gpu")
    value = getattr(resource, "value", resource)
    return value if isinstance(value, int) and value > 0 else 1


def choose_cut(configured: str, cluster: bool, gpus: int) -> EmbedCut:
    """The cut for `embedding.jobs: configured` on a cluster or one machine with `gpus` slots."""
    if configured != "auto":
        return EmbedCut(configured, "embedding.jobs")
    if cluster:
        return EmbedCut("per_benchmark", "auto: jobs run on a cluster, one per model and benchmark")
    if gpus > 1:
        return EmbedCut("per_model", f"auto: one machine with {gpus} GPU slots, one job per model")
    return EmbedCut("single", "auto: one machine, one job imports and decodes once for all models")


def embed_cut(configured: str, workflow: Any) -> EmbedCut:
    """The cut this Snakemake process plans (see the module's docstring)."""
    return choose_cut(configured, submits_to_cluster(workflow), gpu_slots(workflow))
