"""Time of the probe classifiers on cached image embeddings, no model loaded.

The workload of issue 37: 10,000 images of 400 classes (25 each, interleaved), 5 folds, k = 16
(mteb's samples per label; clip_benchmark's linear probe with the same k), d = 512. Data:
seeded Gaussian class centres plus 3x noise, L2-normalised float32 rows (benchmarks/fewshot.py's).
The first torch optimizer of a process imports torch._dynamo (seconds, once per probe job);
it is timed apart. Per classifier: drawing the folds (`vlbench.metrics.probe_folds.draw_folds`)
and training and scoring every fold (`vlbench.metrics.probe_job.score_probe`), wall and CPU
time, and the mean top-1 accuracy. The linear probe runs with clip_benchmark's defaults (lr
0.1, 10 epochs, batch 64) without a validation part (weight decay 0) and, with `--validation
0.2`, with its 97-value weight-decay search as well, at k = `--validation-shots` (10: a fifth of
25 images set aside leaves some classes fewer than 16 to train on, which the reference refuses).
Run: `.venv/bin/python benchmarks/probes.py [--validation 0 0.2]`.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import torch
from fewshot import clustered

from vlbench.config import benchmark_entry_defaults
from vlbench.metrics.probe_folds import draw_folds
from vlbench.metrics.probe_job import score_probe

LABELS = {"benchmark": "synthetic", "subset": "test", "model": "none"}


def timed(classifier: str, settings: dict, rows: np.ndarray, groups: list[str]) -> tuple:
    """(folds wall s, score wall s, score CPU s, mean top-1 %) of one classifier."""
    wall = time.perf_counter()
    folds = draw_folds(classifier, groups, settings)
    drawn = time.perf_counter() - wall
    wall, cpu = time.perf_counter(), time.process_time()
    table = score_probe(classifier, rows, groups, folds, settings, LABELS, 0.95)
    scored, used = time.perf_counter() - wall, time.process_time() - cpu
    return drawn, scored, used, table["value"][0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--classes", type=int, default=400)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--shots", type=int, default=16)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--validation", type=float, nargs="+", default=[0.0])
    parser.add_argument("--validation-shots", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the job's: 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    wall = time.perf_counter()
    torch.optim.AdamW(torch.nn.Linear(2, 2).parameters())  # the first optimizer imports dynamo
    print(f"one-time import of torch's optimizer machinery: {time.perf_counter() - wall:.2f} s")
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores visible, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads); "
        f"load average before: {os.getloadavg()}"
    )
    rows, groups = clustered(args.images, args.classes, args.dim)
    runs = [
        (
            f"linear, validation {p}",
            "linear",
            {"validation_proportion": p, "shots": [args.validation_shots if p else args.shots]},
        )
        for p in args.validation
    ]
    runs.append(("logistic", "logistic", {"shots": [args.shots]}))
    print("| classifier | k | folds drawn, s | trained and scored, s | CPU s | top-1 % |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, classifier, extra in runs:
        defaults = benchmark_entry_defaults("probe", classifier)
        settings = {**defaults, "folds": args.folds, **extra}
        drawn, scored, used, top1 = timed(classifier, settings, rows, groups)
        print(
            f"| {name} | {settings['shots'][0]} | {drawn:.2f} | {scored:.2f} | {used:.2f} | "
            f"{top1:.2f} |"
        )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
