#!/usr/bin/env bash
# The GPU checks of the embedding benchmarks, in one run on a machine with an NVIDIA GPU and no
# internet (python3 there holds torch; the missing packages come as wheels in .whl/):
#
#   part 1: benchmarks/embed_gpu.py (pipeline vs model-only forward, ViT-L-14 bf16)
#   part 2: benchmarks/embed.py --parts b (the workflow vs clip_benchmark, 3 models, on the GPU)
#
#   bash benchmarks/gpu_checks.sh            (device tool: carry [".whl"], timeout_s 540;
#                                             what .whl holds: benchmarks/GPU.md)
#
# Each part runs under its own `timeout`; one failing does not stop the other. Everything is
# written to $OUT (log.txt, results_gpu.json, results.json, gpu_util.csv, gpu_apps.csv,
# vlbench_run.log, clip_benchmark.log). Sizes and limits can be changed through the variables
# below (e.g. P2_PAIRS=2000 bash benchmarks/gpu_checks.sh).
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 1
OUT=${OUT:-/tmp/gpu_checks_out}
mkdir -p "$OUT"
BASE_PY=${BASE_PY:-python3}     # the interpreter that holds torch
VENV=${VENV:-/tmp/v}            # carried packages go here; its bin/ holds snakemake, clip_benchmark
WHEELS=${WHEELS:-$REPO/.whl}
BUDGET_S=${BUDGET_S:-520}       # the whole script ends by then (run's timeout_s: 540)
P1_IMAGES=${P1_IMAGES:-8192}     # enough that the first batch does not decide the rate
P1_WORKERS=${P1_WORKERS:-14}
P1_TIMEOUT=${P1_TIMEOUT:-300}
P1_WORKDIR=${P1_WORKDIR:-/tmp/gpu}
P2_PAIRS=${P2_PAIRS:-2000}
P2_WORKERS=${P2_WORKERS:-8}     # decode workers of both tools (embed.py writes one webdataset shard per worker)
P2_CORES=${P2_CORES:-$(nproc)}  # the workflow's --cores (and the processes making the photos)
P2_BATCH=${P2_BATCH:-64}
P2_WORKDIR=${P2_WORKDIR:-/tmp/e2e}
PARTS=${PARTS-12}          # which parts to run
P1_ARGS=${P1_ARGS:-}            # extra arguments (local smoke tests: --model ViT-B-32 ...)
P2_ARGS=${P2_ARGS:-}

START=$SECONDS
PY=$BASE_PY
SITE=""
say() { echo "== [$((SECONDS - START)) s] $*"; }

setup_env() {
    say "machine"
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    echo "cores: $(nproc)  $(grep -m1 'model name' /proc/cpuinfo)"
    "$BASE_PY" -c 'import sys, torch, torchvision; print(sys.executable, sys.version.split()[0], "torch", torch.__version__, "torchvision", torchvision.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' || return 1
    # Every site directory of the base interpreter (where torch is), to be read by the venv.
    local dirs
    dirs=$("$BASE_PY" -c 'import os, site, torch
d = []
for p in [os.path.dirname(os.path.dirname(torch.__file__)), *site.getsitepackages()]:
    p = os.path.realpath(p)
    if p not in d and os.path.isdir(p):
        d.append(p)
print(repr(d))') || return 1
    say "venv $VENV on top of $dirs"
    rm -rf "$VENV"
    PY=""
    # --without-pip and a .pth instead of --system-site-packages: python3 is itself a venv, and
    # a venv made from a venv would see the base installation's site-packages, not torch's.
    if "$BASE_PY" -m venv --without-pip "$VENV"; then
        local vsite
        vsite=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        echo "import site; list(map(site.addsitedir, $dirs))" > "$vsite/zz_device_site.pth"
        echo "$REPO/src" > "$vsite/vlbench_src.pth"
        if "$VENV/bin/python" -c 'import torch, pip' && "$VENV/bin/python" -m pip install -q \
            --no-index --no-deps --no-compile --no-cache-dir "$WHEELS"/*.whl; then
            PY=$VENV/bin/python
            SITE=$vsite
        else
            echo "venv route failed; installing into $BASE_PY's environment instead"
        fi
    fi
    if [ -z "$PY" ]; then
        PY=$(command -v "$BASE_PY")
        SITE=$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
        echo "$REPO/src" > "$SITE/vlbench_src.pth"
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "$WHEELS"/*.whl || return 1
    fi
    # polars' runtime, faiss, pulp and pycocoevalcap: unpacked wheels, trimmed (.whl/MANIFEST.txt).
    "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="tar")' \
        "$WHEELS/site-trimmed.tar.xz" "$SITE" || return 1
    export PATH="$(dirname "$PY"):$PATH"
    say "check"
    "$PY" - <<'EOF'
import importlib, os, shutil, sys
from pathlib import Path
# benchmarks/embed.py runs <python's folder>/snakemake and /clip_benchmark: make any missing one.
for dist, script in (("snakemake", "snakemake"), ("clip-benchmark", "clip_benchmark")):
    path = Path(sys.executable).parent / script
    if not path.exists():
        from importlib.metadata import distribution
        entry = next(e for e in distribution(dist).entry_points if e.name == script)
        module, function = entry.value.split(":")
        path.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {function}\n"
                        f"sys.exit({function}())\n")
        path.chmod(0o755)
        print(f"wrote {path}")
from importlib import metadata
print("python", sys.executable)
failed = []
for name in ("torch", "torchvision", "open_clip", "polars", "faiss", "jsonschema", "snakemake",
             "snakemake.api", "clip_benchmark.cli", "webdataset", "vlbench",
             "vlbench.embedding.job", "vlbench.planning.plan", "vlbench.rank.index"):
    try:
        module = importlib.import_module(name)
        print(f"import {name}: ok ({getattr(module, '__file__', '')})")
    except Exception as error:  # noqa: BLE001
        failed.append(name)
        print(f"import {name}: FAILED {type(error).__name__}: {error}")
for dist in ("torch", "torchvision", "numpy", "pyarrow", "pillow", "transformers", "timm",
             "huggingface-hub", "packaging", "open_clip_torch", "polars", "polars-runtime-32",
             "faiss-cpu", "snakemake", "clip-benchmark", "webdataset", "jsonschema"):
    try:
        print(f"{dist}=={metadata.version(dist)}")
    except metadata.PackageNotFoundError:
        print(f"{dist}: not installed")
for tool in ("snakemake", "clip_benchmark"):
    print(f"{tool}: {shutil.which(tool)}")
    if shutil.which(tool) != str(Path(sys.executable).parent / tool):
        failed.append(tool)
import torch
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
sys.exit(1 if failed else 0)
EOF
    local rc=$?
    snakemake --version
    "$PY" -m pip check 2>&1 | grep -iE "snakemake|clip|polars|faiss|open.clip|jsonschema|referencing|pydantic|sqlmodel|sqlalchemy|nbformat|webdataset|yte|conda.inject" | head -20
    return $rc
}

start_monitors() {
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 1 \
        > "$OUT/gpu_util.csv" 2>&1 &
    MON_UTIL=$!
    # Which processes hold the GPU, every 2 s: pid, memory, command line.
    (
        while :; do
            t=$(date +%T)
            nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>/dev/null |
                while IFS=, read -r pid mem; do
                    cmd=$(tr '\0' ' ' 2>/dev/null < "/proc/${pid// /}/cmdline" | cut -c1-200)
                    echo "$t,$pid,$mem,$cmd"
                done
            sleep 2
        done
    ) > "$OUT/gpu_apps.csv" 2>&1 &
    MON_APPS=$!
}

stop_monitors() {
    kill "$MON_UTIL" "$MON_APPS" 2>/dev/null
    wait "$MON_UTIL" "$MON_APPS" 2>/dev/null
}

part1() {
    say "part 1: embed_gpu.py --images $P1_IMAGES --workers $P1_WORKERS (timeout $P1_TIMEOUT s)"
    rm -rf "$P1_WORKDIR"
    timeout -k 10 "$P1_TIMEOUT" "$PY" benchmarks/embed_gpu.py --images "$P1_IMAGES" \
        --workers "$P1_WORKERS" --workdir "$P1_WORKDIR" $P1_ARGS
    local rc=$?
    cp "$P1_WORKDIR/results_gpu.json" "$OUT/" 2>/dev/null
    say "part 1 done, rc=$rc"
    rm -rf "$P1_WORKDIR"
    return $rc
}

part2() {
    local left=$((BUDGET_S - (SECONDS - START) - 15))
    if [ "$left" -lt 60 ]; then
        say "part 2 skipped: only $left s left"
        return 1
    fi
    say "part 2: embed.py --parts b --pairs $P2_PAIRS --num-workers $P2_WORKERS --cores $P2_CORES --batch-size $P2_BATCH (timeout $left s)"
    rm -rf "$P2_WORKDIR"
    timeout -k 10 "$left" "$PY" benchmarks/embed.py --parts b --pairs "$P2_PAIRS" \
        --num-workers "$P2_WORKERS" --cores "$P2_CORES" --batch-size "$P2_BATCH" \
        --workdir "$P2_WORKDIR" $P2_ARGS
    local rc=$?
    say "part 2 done, rc=$rc"
    # Snakemake runs in a session of its own, which a timeout does not reach: end what is left
    # of this run's sessions (found by the run directory on their command line).
    local run_dir=$P2_WORKDIR/vlbench-run pid sid
    for pid in $(ls /proc | grep -E '^[0-9]+$'); do
        if tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline" | grep -q -- "--directory $run_dir"; then
            sid=$(awk '{print $6}' "/proc/$pid/stat" 2>/dev/null)
            [ -n "$sid" ] && [ "$sid" -gt 1 ] && echo "ending session $sid" && kill -- "-$sid" 2>/dev/null
        fi
    done
    cp "$P2_WORKDIR/results.json" "$OUT/" 2>/dev/null
    {
        echo "### snakemake.log"
        cat "$run_dir/snakemake.log" 2>/dev/null
        for log in $(find "$run_dir/logs" -type f 2>/dev/null | sort); do
            echo "### $log"
            cat "$log"
        done
    } > "$OUT/vlbench_run.log"
    for log in "$P2_WORKDIR"/clip_benchmark/*.log; do
        [ -f "$log" ] && echo "### $log" && cat "$log"
    done > "$OUT/clip_benchmark.log" 2>/dev/null
    echo "where the embeddings were computed (vlbench provenance):"
    grep -rhoE '"device": *"[^"]*"' "$run_dir/results/embeddings" 2>/dev/null | sort | uniq -c
    grep -rh "GPU claim" "$run_dir/logs" 2>/dev/null | head -5
    echo "GPU processes seen (pid, command):"
    cut -d, -f2,4- "$OUT/gpu_apps.csv" | sort -u | cut -c1-160 | head -20
    return $rc
}

main() {
    setup_env
    local setup_rc=$? p1_rc=skipped p2_rc=skipped
    say "setup rc=$setup_rc (python: $PY)"
    start_monitors
    case $PARTS in *1*) part1; p1_rc=$? ;; esac
    case $PARTS in *2*) part2; p2_rc=$? ;; esac
    stop_monitors
    say "summary: setup rc=$setup_rc, part 1 rc=$p1_rc, part 2 rc=$p2_rc"
    ls -la "$OUT"
    for rc in "$setup_rc" "$p1_rc" "$p2_rc"; do
        [ "$rc" = 0 ] || [ "$rc" = skipped ] || return 1
    done
}

main 2>&1 | tee -a "$OUT/log.txt"
exit "${PIPESTATUS[0]}"
