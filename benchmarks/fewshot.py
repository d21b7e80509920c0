"""Time of the few-shot step: BioCLIP's protocol on cached image embeddings.

The workload of the target: 10,000 images of 400 classes (25 each), k in {1, 5}, 5 folds, the
shuffles in place (the default). Data: seeded Gaussian class centres plus 3x noise, L2-normalised
float32 rows in an interleaved sample order. Reports wall and CPU time of
`vlbench.metrics.fewshot.fewshot_folds` (best and median of the repeats), how many queries the
float32 screening sent to the exact re-decision, and the load average around the run.
Run: `.venv/bin/python benchmarks/fewshot.py [--dims 512 768] [--repeats 3]`.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

from vlbench.metrics import fewshot


def clustered(n_images: int, n_classes: int, dim: int, seed: int = 0):
    """Interleaved labelled rows: class centre + 3x Gaussian noise, L2-normalised float32."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(n_classes), n_images // n_classes)
    rng.shuffle(labels)
    centres = rng.normal(size=(n_classes, dim))
    rows = (centres[labels] + 3.0 * rng.normal(size=(len(labels), dim))).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows, [f"class{label:03d}" for label in labels]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--classes", type=int, default=400)
    parser.add_argument("--dims", type=int, nargs="+", default=[512, 768])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores visible, "
          f"numpy {np.__version__}; load average before: {os.getloadavg()}")  # fmt: skip
    decided = []
    original = fewshot._decide

    def counting(centroids, queries, candidates):
        decided.append(len(queries))
        return original(centroids, queries, candidates)

    fewshot._decide = counting
    print("| d | wall s (best) | wall s (median) | CPU s (best) | 1-shot % | 5-shot % | "
          "re-decided queries / fold |")  # fmt: skip
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for dim in args.dims:
        rows, labels = clustered(args.images, args.classes, dim)
        walls, cpus = [], []
        for _ in range(args.repeats):
            decided.clear()
            wall, cpu = time.perf_counter(), time.process_time()
            results = fewshot.fewshot_folds(rows, labels, [1, 5], 5)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
        one, five = (100 * result.mean for result in results)
        print(
            f"| {dim} | {min(walls):.2f} | {statistics.median(walls):.2f} | {min(cpus):.2f} | "
            f"{one:.2f} | {five:.2f} | {sum(decided) / 10:.1f} |"
        )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
