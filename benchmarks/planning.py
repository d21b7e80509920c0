"""Planning cost: `snakemake -n` of a 100-model config/biocap.yaml and of the shipped one.

Writes `<workdir>/biocap-100.yaml`: config/biocap.yaml with its model list cycled to 100
entries (`<key>-NNN`, the shipped specs, so every hub repository is one of the shipped ones) and
its benchmarks as shipped; entries whose licensed data is not under `data_root` are left out by
the plan as usual (`missing_data: skip`), which leaves the hub benchmarks. Then, in a fresh
working directory (nothing run yet, so every job is planned), it times
`snakemake -n --cores 2` of each config with `/usr/bin/time` (wall seconds, peak RSS) and reads
the job count from the dry run's job table. `--checkout` plans with another checkout's
Snakefile and package (e.g. an older commit unpacked with `git archive`), for a comparison
under the same load.

    .venv/bin/python benchmarks/planning.py --samples 3
    .venv/bin/python benchmarks/planning.py --checkout /tmp/old --samples 3

Prints one JSON object per measurement and a Markdown table for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
TOTAL = re.compile(r"^total\s+(\d+)\s*$", re.MULTILINE)


def many_models(source: Path, count: int) -> dict[str, Any]:
    """`source` with its models cycled to `count` entries (keys `<key>-NNN`)."""
    config = yaml.safe_load(source.read_text(encoding="utf-8"))
    shipped = list(config["models"].items())
    config["models"] = {
        f"{key}-{number:03d}": spec
        for number, (key, spec) in zip(range(count), itertools.cycle(shipped), strict=False)
    }
    return config


def dry_run(checkout: Path, configfile: Path, workdir: Path) -> dict[str, Any]:
    """One `snakemake -n` in a fresh working directory: wall s, peak RSS MB, planned jobs."""
    workdir.mkdir(parents=True, exist_ok=True)
    command = [
        "/usr/bin/time", "-f", "%e %M", str(VENV_BIN / "python"), "-m", "snakemake",
        "--snakefile", str(checkout / "Snakefile"), "--directory", str(workdir),
        "--configfile", str(configfile), "-n", "--cores", "2",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    load = os.getloadavg()
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=workdir)
    if result.returncode != 0:
        raise RuntimeError(result.stdout[-3000:] + result.stderr[-3000:])
    seconds, rss_kb = result.stderr.strip().splitlines()[-1].split()
    jobs = TOTAL.findall(result.stdout + result.stderr)
    table = (result.stdout + result.stderr).rsplit("Job stats:", 1)[-1].split("\ntotal", 1)[0]
    return {
        "wall_s": float(seconds),
        "peak_rss_mb": round(int(rss_kb) / 1024, 1),
        "jobs": int(jobs[-1]) if jobs else None,
        "job_stats": dict(line.split() for line in table.strip().splitlines()[2:]),
        "loadavg": load,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, default=REPO)
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--samples", type=int, default=3)
    args = parser.parse_args()
    checkout = args.checkout.resolve()
    shipped = checkout / "config" / "biocap.yaml"
    results = []
    with tempfile.TemporaryDirectory(prefix="vlbench-planning-") as tmp:
        work = Path(tmp)
        many = work / f"biocap-{args.models}.yaml"
        many.write_text(yaml.safe_dump(many_models(shipped, args.models), sort_keys=False))
        for label, configfile in ((f"{args.models} models", many), ("shipped", shipped)):
            for sample in range(args.samples):
                measured = dry_run(checkout, configfile, work / f"run-{len(results)}")
                measured.update(config=label, sample=sample, checkout=str(checkout))
                print(json.dumps({k: v for k, v in measured.items() if k != "job_stats"}))
                results.append(measured)
    print("\n| config | wall s | peak RSS MB | jobs planned | load before |")
    print("| --- | ---: | ---: | ---: | --- |")
    for row in results:
        load = ", ".join(f"{value:.2f}" for value in row["loadavg"])
        print(
            f"| {row['config']} | {row['wall_s']:.2f} | {row['peak_rss_mb']:.0f} "
            f"| {row['jobs']} | {load} |"
        )
    by_rule = {row["config"]: row["job_stats"] for row in results}
    print("\njobs by rule:", json.dumps(by_rule))


if __name__ == "__main__":
    main()
