"""Time of the paired tests (rule paired_tests) for many models on one metric column.

The workload of issue 35's target: 100 models x 1,000 queries of 0/1 outcomes (a Recall@k
column), the default 1,000 bootstrap resamples and 10,000 sign flips, every pair (4,950). Times
`vlbench.metrics.statistics.all_paired_tests` (every pair in one pass over the resamples) and
`paired_test` (one pair at a time, as before) on a sample of pairs, extrapolated to all of them;
checks that both give the same p-values on that sample.
Run: `.venv/bin/python benchmarks/paired_tests.py [--models 100] [--queries 1000] [--sample 20]`.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time

import numpy as np

from vlbench.metrics.statistics import all_paired_tests, paired_test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--permutations", type=int, default=10000)
    parser.add_argument("--sample", type=int, default=20, help="pairs timed one at a time")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    skill = rng.uniform(0.2, 0.8, size=(args.models, 1))
    outcomes = (rng.random((args.models, args.queries)) < skill).astype(np.float64)
    pairs = list(itertools.combinations(range(args.models), 2))
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    started = time.perf_counter()
    together = all_paired_tests(outcomes, args.bootstrap, args.permutations, seed=0)
    one_pass = time.perf_counter() - started
    sample = pairs[:: max(1, len(pairs) // args.sample)][: args.sample]
    started = time.perf_counter()
    alone = {
        pair: paired_test(outcomes[pair[0]], outcomes[pair[1]], args.bootstrap, args.permutations)
        for pair in sample
    }
    per_pair = (time.perf_counter() - started) / len(sample)
    same = all(together[pair].p_value == alone[pair].p_value for pair in sample)
    print(f"{args.models} models x {args.queries} queries: {len(pairs)} pairs")
    print(f"all pairs in one pass: {one_pass:.1f} s")
    print(
        f"pair by pair: {per_pair:.3f} s per pair, {per_pair * len(pairs):.0f} s for all "
        f"(extrapolated from {len(sample)})"
    )
    print(f"same p-values on the sample: {same}; load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
