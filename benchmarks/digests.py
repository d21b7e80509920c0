"""What checking stored files against their digests costs: throughput of the check (xxh3-128,
`vlbench.hashing.file_digest`) against sha256 on the same file, read from the page cache (the
common case right after a file was written or read) and the bytes a real run checks.

    .venv/bin/python benchmarks/digests.py [--gb 1.0] [--repeat 3]

Prints one Markdown table (benchmarks/RESULTS.md, "Digests of stored files").
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from vlbench.hashing import file_digest, file_sha256

# Bytes the embedding, evaluation and later jobs check per 1,000 images (and as many captions)
# for one model at d = 512 float32: stored shards (matrix and ids, both modalities), gathered
# matrices (read by the evaluation, the few-shot and the examples jobs), a pixel-cache array of
# 224 x 224 x 3 uint8 images (checked when a stored shard is embedded again).
PER_1000 = {
    "stored shards (2 x 1000 x 512 float32)": 2 * 1000 * 512 * 4,
    "gathered matrices, read by 3 jobs": 3 * 2 * 1000 * 512 * 4,
    "pixel cache (1000 x 224 x 224 x 3 uint8)": 1000 * 224 * 224 * 3,
}


def best_seconds(function, path: Path, repeat: int) -> float:
    """The fastest of `repeat` timings (after one warm-up read into the page cache)."""
    function(path)
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        function(path)
        times.append(time.perf_counter() - began)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0, help="test file size (GB)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    size = int(args.gb * 1e9)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "data.bin"
        with open(path, "wb") as handle:
            left = size
            while left:
                block = os.urandom(min(left, 1 << 24))
                handle.write(block)
                left -= len(block)
        rows = [("xxh3_128", file_digest), ("sha256", file_sha256)]
        print(f"| hash | seconds for {args.gb:g} GB | GB/s |")
        print("| --- | ---: | ---: |")
        speed = {}
        for name, function in rows:
            seconds = best_seconds(function, path, args.repeat)
            speed[name] = size / seconds / 1e9
            print(f"| {name} | {seconds:.3f} | {speed[name]:.2f} |")
    print()
    print("| checked per 1,000 pairs | MB | xxh3 seconds |")
    print("| --- | ---: | ---: |")
    for what, nbytes in PER_1000.items():
        print(f"| {what} | {nbytes / 1e6:.1f} | {nbytes / 1e9 / speed['xxh3_128']:.3f} |")


if __name__ == "__main__":
    main()
