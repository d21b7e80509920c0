"""Prove that a refactor changes no output: run the workflow on the test fixtures with one
checkout's code, then compare two such runs file by file.

    # the code of the checkout this script sits in (its src/ goes first on PYTHONPATH)
    .venv/bin/python benchmarks/output_identity.py run --out ../after-outputs
    .venv/bin/python benchmarks/output_identity.py compare ../before-outputs ../after-outputs

`run --out DIR [--configs NAME ...]` runs, one after the other, each named run in its own
folder DIR/<name>/ (DIR/<name>.snakemake.log holds Snakemake's output, DIR/manifest.json the
checkout, its commit, the seconds each run took):

- a shipped config (config, biomedflickr, biovita, biocap, retrieval-classic) exactly as the
  test suite runs it: `tests/support/shipped_configs.py`'s `run_against_a_loopback_hub` (tiny
  seeded checkpoints under the shipped model keys, miniature hub repositories served on
  127.0.0.1, the paper-table targets; biovita with the target `all`, as
  tests/end_to_end/test_shipped_small_configs.py runs it);
- `demo`: `snakemake --cores 2` on the default config (config/config.yaml, what `make demo`
  runs), with `--directory` so that results land in DIR/demo/;
- `shared-demo`: the test suite's shared demo run (tests/conftest.py `demo_run`: two shards per
  modality, qualitative examples, a paper table through a map).

Every run happens in the same place, SCRATCH/<name>/ (`--scratch`, default
/tmp/vlbench-output-identity), and is moved to DIR/<name>/ when it has finished: absolute paths
(the tiny checkpoints, data_root, the model's JSON config, copied into SCRATCH for the same
reason) are part of each model's embedding identity, whose digests fill the shard lists and
provenance files, so two runs compare byte for byte only when they ran at the same paths. For
the same reason the zip archives the fixtures write (the nlphuji miniatures) date their entries
2000-01-01 instead of now: a hub miniature's commit is the digest of its bytes, and a run records
the commit it resolved (results/data/*/benchmark.json, <name>.lock).
`--scratch` must therefore be the same for two runs that are compared; one `run` at a time
holds it (a lock file). A later `run` may add runs to DIR (a run already there is refused) when
it runs the same code (commit and changed files of CODE_PATHS) at the same scratch path.
Each process the runs start (Snakemake and every job's script) records at exit which `vlbench`
it imported (a sitecustomize.py on PYTHONPATH, DIR/<name>.imports.tsv); `run` fails when any of
them is not this checkout's src/vlbench.

`compare A B` compares, for every run folder of A or B, every file under results/ and the
lock files a run writes beside its config (<name>.lock), and prints one line per differing or
missing file, then a summary; it exits 1 when a compared file differs or is missing on one
side. The rules, checked on two runs of the same code (which they leave identical):

- compared byte for byte: everything not named below: the embeddings (*.npy, *.ids.parquet),
  the stored shards of the embed job's resume folders (shards/<modality>/shard-*.npy and
  shard-*.ids.parquet), the pixel cache, prepared data, indexes, ranks, metrics, outcomes,
  folds, tables (CSV, Markdown, LaTeX, reST, HTML, coverage JSON), exports, plots, the
  leaderboard;
- compared with their volatile fields removed (MASKED): the embeddings' provenance records,
  JSON under results/embeddings/ (identity.json, the gathered <modality>.json, each pair's
  shards.json, each stored shard's shard-*.json) without the keys `seconds`,
  `items_per_second`, `peak_rss_mb` (wall time, throughput, memory of the embedding pass),
  `host`, `pid`, `started`, `finished`, `timestamp`, at any depth; and the provenance tables,
  results/provenance/*.csv, without the columns `seconds`, `items_per_second`, `host`; and the
  lock files (<name>.lock) without their `resolved_at:` lines (when each pin was made);
- not compared, only checked to exist on both sides (EXCLUDED): results/timings/** (Snakemake's
  `benchmark:` files: wall time, memory and I/O of each job), results/provenance/*.html (the
  provenance page, which shows the timing columns masked in its CSV twin), results/report.html
  (Snakemake's report: run times, dates, host).

Logs (logs/), Snakemake's state (.snakemake/), the fixtures and the config files written for a
run are inputs or bookkeeping, not results, and are not compared.
"""

from __future__ import annotations

import argparse
import csv
import fcntl
import io
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

# The checkout this script belongs to: its code is what `run` runs.
REPO = Path(__file__).resolve().parents[1]
SHIPPED = ("config", "biomedflickr", "biovita", "biocap", "retrieval-classic")
DEMOS = ("demo", "shared-demo")
DEFAULT_CONFIGS = (*SHIPPED, *DEMOS)
# Targets other than the paper tables (shipped_configs.TARGETS), as the test suite asks.
SHIPPED_TARGETS: dict[str, tuple[str, ...]] = {"biovita": ("all",)}
DEFAULT_SCRATCH = Path("/tmp/vlbench-output-identity")
MANIFEST = "manifest.json"
IMPORT_PROBE_ENV = "VLBENCH_OUTPUT_IDENTITY_IMPORTS"
# What makes the results, for the manifest's list of changed files.
CODE_PATHS = ("Snakefile", "src", "scripts", "workflow", "config", "tests", "envs")
# The date of every zip entry the fixtures write (2000-01-01T00:00:00Z).
FIXTURE_EPOCH = 946684800.0
# Written into SCRATCH/.import-probe/ and put on PYTHONPATH: every Python process the run
# starts appends, at exit, its pid, the vlbench it imported (if any) and its script.
SITECUSTOMIZE = f'''"""output_identity.py's import probe: which vlbench each process imported."""
import atexit
import os
import sys


def _record_vlbench() -> None:
    module = sys.modules.get("vlbench")
    target = os.environ.get("{IMPORT_PROBE_ENV}")
    if module is None or not target:
        return
    script = sys.argv[0] if sys.argv else ""
    with open(target, "a", encoding="utf-8") as handle:
        handle.write(f"{{os.getpid()}}\\t{{module.__file__}}\\t{{script}}\\n")


atexit.register(_record_vlbench)
'''

# Files compared after removing volatile fields: (pattern, kind, fields).
MASKED: tuple[tuple[str, str, frozenset[str]], ...] = (
    (
        "results/embeddings/**.json",
        "json",
        frozenset(
            {
                "seconds",
                "items_per_second",
                "peak_rss_mb",
                "host",
                "pid",
                "started",
                "finished",
                "timestamp",
            }
        ),
    ),
    ("results/provenance/*.csv", "csv", frozenset({"seconds", "items_per_second", "host"})),
    ("*.lock", "lines", frozenset({"resolved_at"})),
)
# Files not compared (only their presence on both sides is checked).
EXCLUDED = (
    "results/timings/**",
    "results/provenance/*.html",
    "results/report.html",
)
# Files compared besides results/**: the lock file a run writes beside its config.
TOP_LEVEL = ("*.lock",)


# --------------------------------------------------------------------------------------------
# run


def use_this_checkout() -> Path:
    """Put this checkout's src/ first on sys.path and on PYTHONPATH (for every process the runs
    start) and tests/support on sys.path (as the tests' configuration does); return the file of
    the vlbench imported, which must be this checkout's."""
    src = REPO / "src"
    sys.path[:0] = [str(src), str(REPO / "tests" / "support")]
    paths = [str(src), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    import vlbench

    imported = Path(vlbench.__file__).resolve()
    if not imported.is_relative_to(src.resolve()):
        raise SystemExit(f"vlbench imported from {imported}, not from {src}")
    return imported


def git_state() -> dict[str, Any]:
    """The checkout's commit and its files that differ from it or are untracked, in the folders
    that make the results (`git status --porcelain` of CODE_PATHS)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD"),
        "changed_files": git("status", "--porcelain", "--", *CODE_PATHS).splitlines(),
    }


def install_import_probe(scratch: Path) -> None:
    """Write the sitecustomize.py probe and put its folder on PYTHONPATH, after src/."""
    folder = scratch / ".import-probe"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    os.environ["PYTHONPATH"] += os.pathsep + str(folder)


def check_imports(record: Path) -> int:
    """The number of processes that recorded their vlbench; fails on one not from src/."""
    src = (REPO / "src").resolve()
    lines = record.read_text(encoding="utf-8").splitlines() if record.exists() else []
    if not lines:
        raise SystemExit(f"no process recorded its vlbench in {record}")
    for line in lines:
        pid, module, script = line.split("\t")
        if not Path(module).resolve().is_relative_to(src):
            raise SystemExit(f"process {pid} ({script}) imported vlbench from {module}")
    return len(lines)


def fixed_model_config(scratch: Path) -> Path:
    """This checkout's tiny architecture file, copied to a path every checkout shares."""
    target = scratch / "models" / "vlbench-tiny.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "config" / "models" / "vlbench-tiny.json", target)
    return target


class FixedZipClock:
    """The `time` module as zipfile sees it while the fixtures are written: a fixed clock, so
    that a zip archive's entries carry the same date on every run (the hub miniatures'
    commits are digests of their bytes, and a run records the commit it resolved)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def localtime(seconds: float | None = None) -> time.struct_time:
        return time.gmtime(FIXTURE_EPOCH if seconds is None else seconds)

    @staticmethod
    def time() -> float:
        return FIXTURE_EPOCH


def run_shipped(name: str, workdir: Path, scratch: Path) -> subprocess.CompletedProcess:
    """A shipped config as the test suite runs it: the tiny architecture at a fixed path, zip
    entries in the miniatures dated FIXTURE_EPOCH."""
    import shipped_configs

    shipped_configs.TINY_MODEL_CONFIG = fixed_model_config(scratch)
    zipfile.time = FixedZipClock()  # type: ignore[attr-defined]
    try:
        targets = SHIPPED_TARGETS.get(name, ())
        return shipped_configs.run_against_a_loopback_hub(name, workdir, *targets)
    finally:
        zipfile.time = time  # type: ignore[attr-defined]


def run_demo(name: str, workdir: Path, scratch: Path) -> subprocess.CompletedProcess:
    """`demo`: the default config (copied with its model file, so its relative model_config
    resolves to a fixed path); `shared-demo`: the test suite's shared demo config."""
    import workflow_helpers

    if name == "demo":
        config_dir = scratch / "demo-config"
        shutil.rmtree(config_dir, ignore_errors=True)
        shutil.copytree(REPO / "config" / "models", config_dir / "models")
        shutil.copyfile(REPO / "config" / "config.yaml", config_dir / "config.yaml")
        configfile = config_dir / "config.yaml"
    else:
        workflow_helpers.TINY_MODEL_CONFIG = fixed_model_config(scratch)
        configfile = workflow_helpers.write_shared_demo(workdir)
    command = workflow_helpers.snakemake_command(workdir, configfile=configfile)
    return subprocess.run(command, cwd=workdir, capture_output=True, text=True, env=os.environ)


def run_one(name: str, scratch: Path, out: Path) -> dict[str, Any]:
    """Run `name` in SCRATCH/<name>, then move it to OUT/<name>; its manifest entry."""
    workdir = scratch / name
    shutil.rmtree(workdir, ignore_errors=True)  # an interrupted run's leftovers
    workdir.mkdir(parents=True)
    checksums = scratch / f"{name}.checksums"
    shutil.rmtree(checksums, ignore_errors=True)
    imports = out / f"{name}.imports.tsv"
    imports.unlink(missing_ok=True)
    os.environ["VLBENCH_CHECKSUM_CACHE"] = str(checksums)  # as the tests' session folder
    os.environ[IMPORT_PROBE_ENV] = str(imports)
    runner = run_demo if name in DEMOS else run_shipped
    start = time.monotonic()
    result = runner(name, workdir, scratch)
    seconds = round(time.monotonic() - start, 1)
    (out / f"{name}.snakemake.log").write_text(
        f"$ {' '.join(map(str, result.args))}\n{result.stdout}\n{result.stderr}", encoding="utf-8"
    )
    entry: dict[str, Any] = {"seconds": seconds, "returncode": result.returncode}
    if result.returncode == 0:
        entry["processes_checked"] = check_imports(imports)
        shutil.move(workdir, out / name)
    shutil.rmtree(checksums, ignore_errors=True)
    return entry


def earlier_runs(path: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """The runs an earlier `run` into the same folder recorded, when it ran the same code at
    the same scratch path (else `run` refuses to add to that folder)."""
    if not path.exists():
        return {}
    earlier = json.loads(path.read_text(encoding="utf-8"))
    same = ("checkout", "commit", "changed_files", "scratch")
    if any(earlier.get(key) != manifest[key] for key in same):
        raise SystemExit(f"{path} records runs of other code or another scratch path")
    return dict(earlier.get("runs", {}))


def command_run(out: Path, configs: Sequence[str], scratch: Path) -> int:
    """The `run` subcommand."""
    unknown = sorted(set(configs) - set(DEFAULT_CONFIGS))
    if unknown:
        raise SystemExit(f"unknown config(s) {unknown}; known: {', '.join(DEFAULT_CONFIGS)}")
    out = out.resolve()
    taken = [name for name in configs if (out / name).exists()]
    if taken:
        raise SystemExit(f"{out} already holds {taken}: choose another --out")
    imported = use_this_checkout()
    print(f"vlbench imported from {imported}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    with open(scratch / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SystemExit(f"another run holds {scratch}") from None
        install_import_probe(scratch)
        manifest: dict[str, Any] = {
            "checkout": str(REPO),
            **git_state(),
            "vlbench": str(imported),
            "python": sys.executable,
            "scratch": str(scratch),
            "runs": {},
        }
        manifest["runs"] = earlier_runs(out / MANIFEST, manifest)
        failed = []
        for name in configs:
            print(f"{name}: running in {scratch / name} ...", flush=True)
            entry = run_one(name, scratch, out)
            manifest["runs"][name] = entry
            (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
            if entry["returncode"]:
                failed.append(name)
                print(f"{name}: FAILED (see {out / name}.snakemake.log)", flush=True)
            else:
                print(
                    f"{name}: {entry['seconds']} s, {entry['processes_checked']} processes "
                    f"imported {REPO / 'src' / 'vlbench'}",
                    flush=True,
                )
    return 1 if failed else 0


# --------------------------------------------------------------------------------------------
# compare


def matches(path: str, pattern: str) -> bool:
    """fnmatch, where `**` also crosses folders (as `*` does in fnmatch)."""
    return fnmatch(path, pattern.replace("**", "*"))


def rule_of(path: str) -> tuple[str, frozenset[str]]:
    """How a result file is compared: ("excluded", {}), (kind, masked fields) or ("bytes", {})."""
    if any(matches(path, pattern) for pattern in EXCLUDED):
        return "excluded", frozenset()
    for pattern, kind, fields in MASKED:
        if matches(path, pattern):
            return kind, fields
    return "bytes", frozenset()


def result_files(run: Path) -> set[str]:
    """The run folder's compared files, relative to it."""
    found = {
        path.relative_to(run).as_posix()
        for path in (run / "results").rglob("*")
        if path.is_file() or path.is_symlink()
    }
    for pattern in TOP_LEVEL:
        found |= {path.name for path in run.glob(pattern) if path.is_file()}
    return found


def without_keys(value: Any, fields: frozenset[str]) -> Any:
    """A JSON value without the keys in `fields`, at any depth (key order kept)."""
    if isinstance(value, dict):
        return {k: without_keys(v, fields) for k, v in value.items() if k not in fields}
    if isinstance(value, list):
        return [without_keys(item, fields) for item in value]
    return value


def masked_json(data: bytes, fields: frozenset[str]) -> str:
    return json.dumps(without_keys(json.loads(data), fields), indent=1)


def masked_lines(data: bytes, fields: frozenset[str]) -> str:
    """A YAML file without the lines that set one of `fields`."""
    return "\n".join(
        line
        for line in data.decode("utf-8").splitlines()
        if line.lstrip().partition(":")[0] not in fields
    )


def masked_csv(data: bytes, fields: frozenset[str]) -> str:
    rows = list(csv.reader(io.StringIO(data.decode("utf-8"))))
    keep = [number for number, name in enumerate(rows[0] if rows else []) if name not in fields]
    return "\n".join(",".join(row[number] for number in keep) for row in rows)


MASKERS: dict[str, Callable[[bytes, frozenset[str]], str]] = {
    "json": masked_json,
    "csv": masked_csv,
    "lines": masked_lines,
}


def first_difference(a: str, b: str) -> str:
    """Where two texts first differ, as a short note."""
    lines_a, lines_b = a.splitlines(), b.splitlines()
    for number, (line_a, line_b) in enumerate(zip(lines_a, lines_b, strict=False), 1):
        if line_a != line_b:
            return f"line {number}: {line_a.strip()[:60]!r} vs {line_b.strip()[:60]!r}"
    return f"{len(lines_a)} vs {len(lines_b)} lines"


IDENTICAL, MASKED_IDENTICAL = "identical", "identical once masked"


@dataclass
class Tally:
    """The comparison's counts."""

    compared: int = 0
    identical: int = 0
    identical_masked: int = 0
    differing: list[str] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    excluded: int = 0


def compare_file(a: Path, b: Path, rule: str, fields: frozenset[str]) -> str:
    """IDENTICAL (byte for byte), MASKED_IDENTICAL (once volatile fields are removed), or why
    the two files differ."""
    data_a, data_b = a.read_bytes(), b.read_bytes()
    if data_a == data_b:
        return IDENTICAL
    if rule == "bytes":
        return f"bytes differ ({len(data_a)} vs {len(data_b)} bytes)"
    try:
        text_a, text_b = MASKERS[rule](data_a, fields), MASKERS[rule](data_b, fields)
    except (ValueError, UnicodeDecodeError) as error:
        return f"unreadable as {rule}: {error}"
    if text_a == text_b:
        return MASKED_IDENTICAL
    return f"differs after masking: {first_difference(text_a, text_b)}"


def run_folders(root: Path) -> set[str]:
    return {path.name for path in root.iterdir() if (path / "results").is_dir()}


def compare_runs(a: Path, b: Path) -> tuple[Tally, list[str]]:
    """Compare every run folder of `a` and `b`; the tally and one line per problem."""
    tally, lines = Tally(), []
    for name in sorted(run_folders(a) | run_folders(b)):
        files_a = result_files(a / name) if (a / name / "results").is_dir() else set()
        files_b = result_files(b / name) if (b / name / "results").is_dir() else set()
        for path in sorted(files_a | files_b):
            where = f"{name}/{path}"
            if path not in files_b:
                tally.only_a.append(where)
                lines.append(f"ONLY IN A  {where}")
                continue
            if path not in files_a:
                tally.only_b.append(where)
                lines.append(f"ONLY IN B  {where}")
                continue
            rule, fields = rule_of(path)
            if rule == "excluded":
                tally.excluded += 1
                continue
            tally.compared += 1
            outcome = compare_file(a / name / path, b / name / path, rule, fields)
            if outcome == IDENTICAL:
                tally.identical += 1
            elif outcome == MASKED_IDENTICAL:
                tally.identical_masked += 1
            else:
                tally.differing.append(where)
                lines.append(f"DIFFERS    {where}: {outcome}")
    return tally, lines


def manifests_note(a: Path, b: Path) -> Iterator[str]:
    """Warnings about two runs that cannot compare byte for byte (different scratch paths)."""
    found = []
    for root in (a, b):
        path = root / MANIFEST
        found.append(json.loads(path.read_text(encoding="utf-8")) if path.exists() else {})
    scratches = {manifest.get("scratch") for manifest in found if manifest}
    if len(scratches) > 1:
        yield f"warning: the runs used different scratch paths {sorted(map(str, scratches))}"
    for root, manifest in zip((a, b), found, strict=True):
        if manifest:
            changed = len(manifest.get("changed_files", []))
            yield (
                f"{root}: {manifest.get('checkout')} at {manifest.get('commit', '?')[:12]}"
                f" ({changed} files changed or untracked)"
            )


def command_compare(a: Path, b: Path) -> int:
    """The `compare` subcommand."""
    for note in manifests_note(a, b):
        print(note)
    tally, lines = compare_runs(a, b)
    for line in lines:
        print(line)
    print(
        f"files compared: {tally.compared}; identical: {tally.identical} byte for byte"
        f" + {tally.identical_masked} after masking volatile fields; differing:"
        f" {len(tally.differing)}; only in A: {len(tally.only_a)}; only in B:"
        f" {len(tally.only_b)}; excluded (timings, present on both sides): {tally.excluded}"
    )
    problems = tally.differing or tally.only_a or tally.only_b
    print("RESULT: outputs differ" if problems else "RESULT: outputs identical")
    return 1 if problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the workflow on the fixtures with this checkout")
    run.add_argument("--out", type=Path, required=True, help="folder for the runs (new)")
    run.add_argument(
        "--configs",
        nargs="+",
        default=list(DEFAULT_CONFIGS),
        metavar="NAME",
        help=f"runs to make (default: {' '.join(DEFAULT_CONFIGS)})",
    )
    run.add_argument(
        "--scratch",
        type=Path,
        default=DEFAULT_SCRATCH,
        help=f"where each run happens before it is moved (default {DEFAULT_SCRATCH}); "
        "the same for every run to be compared",
    )
    compare = commands.add_parser("compare", help="compare two `run` folders")
    compare.add_argument("a", type=Path)
    compare.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        return command_run(args.out, args.configs, args.scratch)
    return command_compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
