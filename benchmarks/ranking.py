"""Time and peak memory of the exact ranks against faiss top-1000 search and a bare matmul.

Each measurement runs in a fresh process (peak RSS is per process): the process makes the
seeded normalised data, notes its RSS, runs one method and reports wall time and peak RSS.
Run: `.venv/bin/python benchmarks/ranking.py [--shapes 20000x20000 20000x100000] [--dim 512]`.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import resource
import time

import numpy as np

FAISS_K = 1000


def _data(n_queries: int, n_gallery: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Paired data: query i is a noisy copy of gallery item i (so recalls are not trivial)."""
    rng = np.random.default_rng(0)
    gallery = rng.standard_normal((n_gallery, dim), dtype=np.float32)
    noise = rng.standard_normal((n_queries, dim), dtype=np.float32)
    queries = gallery[:n_queries] + 8.0 * noise
    gallery /= np.linalg.norm(gallery, axis=1, keepdims=True)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return queries, gallery


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _measure(method: str, n_queries: int, n_gallery: int, dim: int, block_mb: int, out) -> None:
    queries, gallery = _data(n_queries, n_gallery, dim)
    base = _rss_mb()
    start = time.perf_counter()
    recall: dict[int, float] = {}
    if method == "matmul":
        step = max(1, (block_mb << 20) // (4 * n_gallery))
        for lo in range(0, n_queries, step):
            scores = queries[lo : lo + step] @ gallery.T
            del scores
    elif method == "exact":
        from vlbench.rank.exact import Relevance, exact_ranks

        relevance = Relevance(np.arange(n_queries + 1), np.arange(n_queries))
        ranks = exact_ranks(queries, gallery, relevance, "index", block_mb).ranks
        recall = {k: float(np.mean(ranks <= k)) for k in (1, 10, 100, 1000)}
    else:
        import faiss

        index = faiss.IndexFlatIP(dim)
        index.add(gallery)
        _, found = index.search(queries, FAISS_K)
        truth = np.arange(n_queries)[:, None]
        recall = {
            k: float(np.mean((found[:, :k] == truth).any(axis=1))) for k in (1, 10, 100, 1000)
        }
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out.put({"seconds": seconds, "peak_mb": peak, "data_mb": base, "recall": recall})


def run(method: str, n_queries: int, n_gallery: int, dim: int, block_mb: int) -> dict:
    """One measurement in a fresh spawned process."""
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(
        target=_measure, args=(method, n_queries, n_gallery, dim, block_mb, queue)
    )
    process.start()
    result = queue.get()
    process.join()
    return result


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with open("/proc/cpuinfo", encoding="utf-8") as handle:
        names = [line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")]
    if names:
        cpu = names[0]
    with open("/proc/meminfo", encoding="utf-8") as handle:
        total = int(handle.readline().split()[1]) / 2**20
    return f"{cpu}, {os.cpu_count()} cores visible, {total:.0f} GiB RAM, {platform.platform()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["20000x20000", "20000x100000"])
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--block-mb", type=int, default=1024)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print(f"load average before: {os.getloadavg()}")
    print(f"numpy {np.__version__}, block_mb {args.block_mb}, d {args.dim}")
    print("| shape | method | seconds | x matmul | peak RSS MB | data RSS MB | R@1 | R@1000 |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for shape in args.shapes:
        n_queries, n_gallery = map(int, shape.split("x"))
        results = {m: run(m, n_queries, n_gallery, args.dim, args.block_mb) for m in
                   ("matmul", "exact", "faiss_top1000")}  # fmt: skip
        floor = results["matmul"]["seconds"]
        for method, r in results.items():
            rec = r["recall"]
            print(
                f"| {shape} | {method} | {r['seconds']:.1f} | {r['seconds'] / floor:.2f} | "
                f"{r['peak_mb']:.0f} | {r['data_mb']:.0f} | "
                f"{100 * rec.get(1, float('nan')):.3f} | {100 * rec.get(1000, float('nan')):.3f} |"
            )
        same = all(
            results["exact"]["recall"][k] == results["faiss_top1000"]["recall"][k]
            for k in (1, 10, 100, 1000)
        )
        print(f"| {shape} | identical R@1/10/100/1000 exact vs faiss: {same} | | | | | | |")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
