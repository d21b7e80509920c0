"""Parse-time cost of content tracking: fingerprinting a local image folder of N files.

Writes N small JPEG-named files (default 100,000) into a temporary folder laid out as a local
imagefolder benchmark (metadata.csv + images/<class>/<n>.jpg), then measures:

(a) `vlbench.planning.fingerprints.fingerprint` on the folder, warm page cache (best of 3), and
    once after dropping the page cache when running as root (`/proc/sys/vm/drop_caches`);
(b) after the benchmark's prepare job has run, a whole `snakemake --dry-run` (which then compares
    the prepare job's params, fingerprint included) against the same dry run on a folder of 10
    files: the difference is what tracking N files costs every plan. Then one image's time is
    changed and the dry run must schedule the prepare job again.

Usage: .venv/bin/python benchmarks/fingerprint.py [--files 100000]
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from PIL import Image

from vlbench.planning.fingerprints import fingerprint

REPO = Path(__file__).resolve().parents[1]
PREPARE_JOB = "\nrule prepare_benchmark:"  # how a dry run lists a scheduled prepare job


def tiny_jpeg() -> bytes:
    """An 8x8 JPEG (every file holds it: only their paths and stat results differ)."""
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (120, 30, 200)).save(buffer, format="JPEG")
    return buffer.getvalue()


def write_folder(root: Path, files: int, per_class: int = 1000) -> None:
    """metadata.csv + images/<class>/<n>.jpg, `per_class` images a class."""
    data = tiny_jpeg()
    lines = ["filepath,class"]
    for number in range(files):
        label = f"c{number // per_class:04d}"
        relative = f"images/{label}/{number:07d}.jpg"
        path = root / relative
        if number % per_class == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        lines.append(f"{relative},{label}")
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def drop_caches() -> bool:
    """Drop the page, dentry and inode caches (root only); True if it worked."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def timed_fingerprint(root: Path) -> float:
    start = time.perf_counter()
    fingerprint([root])
    return time.perf_counter() - start


def write_config(path: Path, folder: Path) -> Path:
    """A config with the tiny demo model and `folder` as a zero-shot benchmark."""
    model = {
        "name": "vlbench-tiny",
        "random_init_seed": 0,
        "model_config": str(REPO / "config" / "models" / "vlbench-tiny.json"),
    }
    benchmark = {"protocol": "zeroshot", "source": {"path": str(folder)}}
    config = {"models": {"tiny": model}, "benchmarks": {"folder": benchmark}}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def snakemake(workdir: Path, config: Path, *extra: str) -> str:
    """Run the workflow's Snakefile in `workdir`; return its output."""
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
    command += ["--directory", str(workdir), "--configfile", str(config), "--cores", "2", *extra]
    result = subprocess.run(command, check=True, capture_output=True, text=True, cwd=workdir)
    return result.stdout + result.stderr


def plan_seconds(tmp: Path, name: str, files: int) -> float:
    """Prepare a folder benchmark of `files` images, then time a no-op dry run (best of 3)."""
    folder = tmp / name
    if not folder.exists():
        write_folder(folder, files)
    workdir = tmp / f"work-{name}"
    workdir.mkdir()
    config = write_config(tmp / f"{name}.yaml", folder)
    snakemake(workdir, config, "--until", "prepare_benchmark")
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        output = snakemake(workdir, config, "--dry-run", "--until", "prepare_benchmark")
        best = min(best, time.perf_counter() - start)
        assert PREPARE_JOB not in output, output[-2000:]
    image = next((folder / "images").rglob("*.jpg"))
    os.utime(image, ns=(0, image.stat().st_mtime_ns + 1))
    output = snakemake(workdir, config, "--dry-run", "--until", "prepare_benchmark")
    assert PREPARE_JOB in output, "a touched image did not schedule the prepare job"
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vlbench-fingerprint-") as tmp:
        root = Path(tmp) / "folder"
        start = time.perf_counter()
        write_folder(root, args.files)
        print(f"wrote {args.files} files in {time.perf_counter() - start:.1f} s")
        warm = min(timed_fingerprint(root) for _ in range(3))
        print(f"(a) fingerprint, warm cache: {warm:.3f} s ({fingerprint([root])})")
        if drop_caches():
            print(f"(a) fingerprint, cold cache: {timed_fingerprint(root):.3f} s")
        else:
            print("(a) cold cache: not measured (needs root to drop the page cache)")
        plain = plan_seconds(Path(tmp), "small", 10)
        tracked = plan_seconds(Path(tmp), "folder", args.files)
        print(
            f"(b) no-op snakemake --dry-run after prepare, 10 files: {plain:.2f} s, "
            f"{args.files} files: {tracked:.2f} s, difference {tracked - plain:.2f} s "
            "(and touching one image scheduled the prepare job again)"
        )


if __name__ == "__main__":
    main()
