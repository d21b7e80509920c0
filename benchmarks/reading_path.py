"""How tangled the embed job's code path is: the source files a reader visits following it.

    .venv/bin/python benchmarks/reading_path.py [--tree] [--json PATH] [--workdir DIR]

Runs the code of the checkout this script sits in (its src/ goes first on sys.path and on
PYTHONPATH), in four steps:

1. the default config (config/config.yaml: one model, one benchmark) runs in a temporary folder
   with `snakemake --cores 2 --until embed --skip-script-cleanup`, so that Snakemake itself
   computes the embed job's input, output, params, threads, log and config, and leaves them in
   the job's script (.snakemake/scripts/tmp*.embed.py, whose preamble holds the pickled
   `snakemake` object the script directive gives);
2. everything the job stored is removed: results/embeddings/ (each pair's shard list and stored
   shards) and results/pixels/ (the pixel cache); weights' remembered checksums go to a fresh,
   empty folder ($VLBENCH_CHECKSUM_CACHE), so the job hashes its weights as a first run does;
3. scripts/embed.py runs in this process (`runpy`, with that `snakemake` object), under
   `sys.setprofile` (and `threading.setprofile` for the threads it starts): every call of a
   function defined in a file under src/vlbench/ or in scripts/embed.py is recorded. Calls made
   while a module is being imported (its top-level code and what that calls) are not: a reader
   follows calls, not import side effects. Comprehensions and generator expressions are read
   as part of the function around them; lambdas count as functions. Forked DataLoader workers
   are not profiled (the profiler is switched off in a forked child): what they run (the image
   decode) is not counted.
   A function called from library code (a callback, a thread's target) hangs under the nearest
   recorded caller (for a thread, the function that started it);
4. the call tree keeps only the first call of each function (a reader reads a function once),
   children in the order of their first calls, and is walked depth first as a reader would:
   entering a callee and returning to its caller are steps. Counted: (a) the distinct files
   visited; (b) the steps that change file; (c) of those, the ones that arrive in a file
   visited before ("comes back"; split into calls into such a file and returns to a caller,
   which always come back); (d) per file, how many times the reader arrives in it (the
   start counts as an arrival in scripts/embed.py).

Three options change what is read:
- --sites: every distinct call site is read, not only a function's first call: a function
  called from three places is a step there and back from each (read, with its own calls, the
  first time only). Work repeated in several places (the same pipeline worked out five times)
  counts five times, as it does for a reader of the code.
- --stage: only the embedding stage's own modules are recorded (src/vlbench/embedding/,
  without models/: the adapters behind `load_model(spec)`, like the shared modules outside the
  stage, are leaves a reader of the job does not follow into).
- --follow: only the functions the job's parameter passes through: those whose arguments
  (self included) are, or hold, an object of a CARRIERS class (the job's pairs: the `jobs`
  mapping of EmbeddingJob before the plan-then-execute change; the EmbedJob, its JobPlan, a
  Pair, its PairPlan, an ImageWork or a ModelWork after it); a dropped function's kept
  descendants hang under its nearest kept caller.

Prints a per-file table and a JSON summary (also written to --json PATH); --tree prints the
tree. The numbers are reproducible: the same code gives the same tree on every run.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PACKAGE = SRC / "vlbench"
SCRIPT = REPO / "scripts" / "embed.py"
# `--stage`: the embedding stage's own modules (its model adapters, models/, and the shared
# modules outside it are leaves a reader of the job does not follow into).
STAGE = PACKAGE / "embedding"
PREAMBLE_START = "######## snakemake preamble start"
PREAMBLE_END = "######## snakemake preamble end"
# What the job stores, removed before the profiled run (relative to the run's folder).
STORED = ("results/embeddings", "results/pixels")
IMPORT = "<import>"  # a stack entry: a module being imported (its calls are not recorded)
# Code objects read as part of the function around them (their calls hang under it).
INLINE = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"})

FuncKey = tuple[str, int, str]  # file, first line, qualified name
# `--follow`: the classes that carry the embed job's parameter: the job's pairs, before the
# plan-then-execute change (the `jobs` mapping of EmbeddingJob) and after it (the EmbedJob and
# its plan, a Pair and its plan, an image shard's work), and what a pair is made of in both (its
# settings, its shards, its stores).
CONTAINERS = frozenset({"EmbeddingJob", "EmbedJob", "JobPlan", "Pair", "PairPlan", "ImageWork"})
CARRIERS = CONTAINERS | {"ModelWork"}


def carries(value: object) -> bool:
    """Whether a value is (or is a mapping or sequence holding) an object of a CARRIERS class."""
    if type(value).__name__ in CARRIERS:
        return True
    if isinstance(value, dict):
        return any(type(item).__name__ in CARRIERS for item in list(value.values())[:1])
    if isinstance(value, (list, tuple)):
        return any(type(item).__name__ in CARRIERS for item in list(value)[:1])
    return False


def carries_parameter(frame: FrameType) -> bool:
    """Whether a function's arguments (self included) carry the job's parameter."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kwargs
    values = [frame.f_locals.get(name) for name in code.co_varnames[:count]]
    return any(carries(value) for value in values)


@dataclass
class Node:
    """A function's first call: who made it, in what order."""

    key: FuncKey
    parent: FuncKey | None
    order: int
    children: list[FuncKey] = field(default_factory=list)
    # Whether its arguments carry the job's parameter (`--follow`).
    carrier: bool = False


class Recorder:
    """A profile function that records the first call of every function of the tracked files,
    under its nearest recorded caller, one stack per thread."""

    def __init__(self, tracked_prefix: str, script: str, untracked: tuple[str, ...] = ()) -> None:
        self.tracked_prefix = tracked_prefix
        self.untracked = untracked
        self.script = script
        self.nodes: dict[FuncKey, Node] = {}
        # `--sites`: per function, the functions it calls at each of its distinct call sites
        # (a function called from two lines of its caller is listed twice), in call order.
        self.sites: dict[FuncKey, list[FuncKey]] = defaultdict(list)
        self.seen_sites: set[tuple[FuncKey, Any, FuncKey]] = set()
        self.root: FuncKey | None = None
        self.stacks: dict[int, list[Any]] = {}
        self.thread_parents: dict[threading.Thread, Any] = {}
        self._tracked: dict[str, bool] = {}
        self._lock = threading.Lock()

    def tracked(self, filename: str) -> bool:
        known = self._tracked.get(filename)
        if known is None:
            known = filename == self.script or (
                filename.startswith(self.tracked_prefix) and not filename.startswith(self.untracked)
            )
            self._tracked[filename] = known
        return known

    def context(self, stack: list[Any]) -> Any:
        """The nearest recorded caller (or IMPORT) on a stack; for a thread's first frame, the
        function that started the thread."""
        for entry in reversed(stack):
            if entry is not None:
                return entry
        return self.thread_parents.get(threading.current_thread())

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            stack = self.stacks.setdefault(threading.get_ident(), [])
            stack.append(self.entry(frame, stack))
        elif event == "return":
            stack = self.stacks.get(threading.get_ident())
            if stack:
                stack.pop()

    def entry(self, frame: FrameType, stack: list[Any]) -> Any:
        """The stack entry of a new frame: its function's key when recorded, IMPORT for a
        module's top-level code (or a call inside one), None for an untracked function."""
        code = frame.f_code
        if code.co_name == "<module>":
            if self.root is None and code.co_filename == self.script:
                self.root = (code.co_filename, code.co_firstlineno, code.co_qualname)
                self.nodes[self.root] = Node(self.root, None, 0, carrier=True)
                return self.root
            return IMPORT
        if not self.tracked(code.co_filename) or code.co_name in INLINE:
            return None
        parent = self.context(stack)
        if parent == IMPORT or parent is None:
            return IMPORT if parent == IMPORT else None
        key = (code.co_filename, code.co_firstlineno, code.co_qualname)
        caller = frame.f_back
        site = (caller.f_code.co_filename, caller.f_lineno) if caller is not None else None
        with self._lock:
            if key not in self.nodes:
                carrier = carries_parameter(frame)
                self.nodes[key] = Node(key, parent, len(self.nodes), carrier=carrier)
                self.nodes[parent].children.append(key)
                self.sites[parent].append(key)
                self.seen_sites.add((parent, site, key))
            elif (parent, site, key) not in self.seen_sites:
                self.seen_sites.add((parent, site, key))
                self.sites[parent].append(key)  # one more place that calls a function read
        return key

    def thread_started(self, thread: threading.Thread) -> None:
        """Remember who starts a thread (called from the patched `Thread.start`)."""
        stack = self.stacks.get(threading.get_ident(), [])
        self.thread_parents[thread] = self.context(stack)


def stop_profiling() -> None:
    sys.setprofile(None)
    threading.setprofile(None)  # type: ignore[arg-type]


def profile_script(snakemake: object, workdir: Path, stage: bool = False) -> Recorder:
    """Run scripts/embed.py in this process on `snakemake`, recording its calls (`stage`: only
    those of the embedding stage's own modules, STAGE)."""
    if stage:
        recorder = Recorder(str(STAGE) + os.sep, str(SCRIPT), (str(STAGE / "models") + os.sep,))
    else:
        recorder = Recorder(str(PACKAGE) + os.sep, str(SCRIPT))
    original_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        recorder.thread_started(thread)
        original_start(thread)

    os.register_at_fork(after_in_child=stop_profiling)  # DataLoader workers: not profiled
    cwd = Path.cwd()
    os.chdir(workdir)
    threading.Thread.start = start  # type: ignore[method-assign]
    threading.setprofile(recorder)
    sys.setprofile(recorder)
    try:
        runpy.run_path(str(SCRIPT), init_globals={"snakemake": snakemake}, run_name="__main__")
    finally:
        stop_profiling()
        threading.Thread.start = original_start  # type: ignore[method-assign]
        os.chdir(cwd)
    return recorder


def use_this_checkout() -> str:
    """Put this checkout's src/ first (sys.path, PYTHONPATH); the vlbench file imported."""
    sys.path.insert(0, str(SRC))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(SRC), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )
    import vlbench

    if not Path(vlbench.__file__).resolve().is_relative_to(SRC):
        raise SystemExit(f"vlbench imported from {vlbench.__file__}, not from {SRC}")
    return vlbench.__file__


def run_up_to_embed(workdir: Path) -> Path:
    """The default config's workflow up to its embed job (kept script); that script's path."""
    config_dir = workdir / "config"
    shutil.copytree(REPO / "config" / "models", config_dir / "models")
    shutil.copyfile(REPO / "config" / "config.yaml", config_dir / "config.yaml")
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
    command += ["--directory", str(workdir), "--configfile", str(config_dir / "config.yaml")]
    command += ["--cores", "2", "--until", "embed", "--skip-script-cleanup"]
    env = {**os.environ, "VLBENCH_CHECKSUM_CACHE": str(workdir / "checksums-workflow")}
    done = subprocess.run(command, cwd=workdir, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"snakemake failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    scripts = sorted((workdir / ".snakemake" / "scripts").glob("tmp*.embed.py"))
    if len(scripts) != 1:
        raise SystemExit(f"expected one kept embed script, found {scripts}")
    return scripts[0]


def snakemake_object(script: Path) -> object:
    """The `snakemake` object a kept rule script's preamble unpickles."""
    text = script.read_text(encoding="utf-8")
    start = text.index("\n", text.index(PREAMBLE_START)) + 1
    namespace: dict[str, Any] = {"__file__": str(script)}
    exec(text[start : text.index(PREAMBLE_END)], namespace)  # Snakemake's own preamble
    return namespace["snakemake"]


@dataclass
class Walk:
    """The reader's walk of the tree."""

    files: list[str] = field(default_factory=list)  # in order of first arrival
    arrivals: dict[str, int] = field(default_factory=dict)
    functions: dict[str, int] = field(default_factory=dict)
    steps: int = 0
    file_changes: int = 0
    comes_back: int = 0
    # Of the comes-back steps, those that enter a callee (the others return to a caller).
    calls_back: int = 0

    def arrive(self, source: str | None, target: str, call: bool = True) -> None:
        """A step from `source` (None: the start) into `target`, entering a callee (`call`) or
        returning to a caller."""
        if source is not None:
            self.steps += 1
            if source == target:
                return
            self.file_changes += 1
            if target in self.arrivals:
                self.comes_back += 1
                self.calls_back += call
        if target not in self.arrivals:
            self.files.append(target)
        self.arrivals[target] = self.arrivals.get(target, 0) + 1


def relative(filename: str) -> str:
    path = Path(filename)
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else filename


def followed(recorder: Recorder) -> None:
    """Keep only the functions whose arguments carry the job's parameter (`--follow`): every
    other function is dropped and its kept descendants hang under its nearest kept caller (in
    the first-call tree and in the call sites' lists)."""
    nodes = recorder.nodes

    def kept(calls: list[FuncKey], lists: dict[FuncKey, list[FuncKey]]) -> list[FuncKey]:
        found: list[FuncKey] = []
        for child in calls:
            found += [child] if nodes[child].carrier else kept(lists[child], lists)
        return found

    first_calls = {
        key: sorted(node.children, key=lambda k: nodes[k].order) for key, node in nodes.items()
    }
    sites = {key: list(recorder.sites[key]) for key in nodes}
    for key in [key for key, node in nodes.items() if node.carrier]:
        nodes[key].children = kept(first_calls[key], first_calls)
        recorder.sites[key] = kept(sites[key], sites)


def walk(recorder: Recorder, sites: bool = False) -> tuple[Walk, list[str]]:
    """Walk the first-call tree depth first as a reader; the walk and the tree's lines. With
    `sites`, every distinct call site is a step into its callee and back, and a function
    already read is not read again (its line is marked "again")."""
    if recorder.root is None:
        raise SystemExit("scripts/embed.py was not run")
    done, lines = Walk(), []
    read: set[FuncKey] = set()

    def visit(key: FuncKey, depth: int, caller: str | None) -> None:
        node = recorder.nodes[key]
        file = relative(key[0])
        done.arrive(caller, file)
        if key in read:
            lines.append(f"{'  ' * depth}{key[2]}  ({file}:{key[1]}) again")
            return
        read.add(key)
        done.functions[file] = done.functions.get(file, 0) + 1
        lines.append(f"{'  ' * depth}{key[2]}  ({file}:{key[1]})")
        if sites:
            children = recorder.sites[key]
        else:
            children = sorted(node.children, key=lambda k: recorder.nodes[k].order)
        for child in children:
            visit(child, depth + 1, file)
            done.arrive(relative(child[0]), file, call=False)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    visit(recorder.root, 0, None)
    return done, lines


def summary(done: Walk, checkout: str, vlbench_file: str) -> dict[str, Any]:
    return {
        "checkout": checkout,
        "vlbench": vlbench_file,
        "functions": sum(done.functions.values()),
        "files": len(done.files),
        "steps": done.steps,
        "file_changing_steps": done.file_changes,
        "comes_back": done.comes_back,
        "comes_back_by_a_call": done.calls_back,
        "comes_back_by_a_return": done.comes_back - done.calls_back,
        "per_file": {
            file: {"arrivals": done.arrivals[file], "functions": done.functions[file]}
            for file in done.files
        },
    }


def table(done: Walk) -> str:
    width = max(len(file) for file in done.files)
    rows = [f"{'file':<{width}}  arrivals  functions"]
    rows += [
        f"{file:<{width}}  {done.arrivals[file]:>8}  {done.functions[file]:>9}"
        for file in done.files
    ]
    rows.append(
        f"{len(done.files)} files, {sum(done.functions.values())} functions, {done.steps} steps,"
        f" {done.file_changes} change file, {done.comes_back} of them come back"
        f" ({done.calls_back} entering a callee, {done.comes_back - done.calls_back} returning)"
    )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="store_true", help="print the first-call tree")
    parser.add_argument("--json", type=Path, help="also write the JSON summary here")
    parser.add_argument(
        "--workdir", type=Path, help="run folder (kept; default: a temporary one, removed)"
    )
    parser.add_argument(
        "--sites",
        action="store_true",
        help="read every distinct call site (a function called from several places is "
        "visited from each; read once)",
    )
    parser.add_argument(
        "--stage",
        action="store_true",
        help="record only the embedding stage's own modules (STAGE, models/ left out)",
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="follow the job's parameter: only functions whose arguments carry it (CARRIERS)",
    )
    args = parser.parse_args(argv)
    vlbench_file = use_this_checkout()
    print(f"vlbench imported from {vlbench_file}", flush=True)
    with tempfile.TemporaryDirectory(prefix="reading-path-") as scratch:
        workdir = (args.workdir or Path(scratch) / "run").resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        snakemake = snakemake_object(run_up_to_embed(workdir))
        for stored in STORED:
            shutil.rmtree(workdir / stored, ignore_errors=True)
        os.environ["VLBENCH_CHECKSUM_CACHE"] = str(Path(scratch) / "checksums-profiled")
        recorder = profile_script(snakemake, workdir, args.stage)
    if args.follow:
        followed(recorder)
    done, lines = walk(recorder, args.sites)
    if args.tree:
        print("\n".join(lines))
    print(table(done))
    result = summary(done, str(REPO), vlbench_file)
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
