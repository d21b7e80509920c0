"""Embedding-engine benchmark: throughput, end-to-end vs clip_benchmark, peak memory, storage.

Everything in one run, on synthetic photo-like JPEGs (default 1600 x 1300, quality 90):

a) pipeline images/s (decode + preprocess + forward) vs model-only forward on pre-decoded
   tensors, same model and batch size; also the warm pixel-cache pipeline and draft decoding;
b) end-to-end wall time of the vlbench workflow for 3 random-weight models sharing a 224 px
   transform (ViT-B-32, ViT-B-16, ViT-S-32, saved as open_clip checkpoints) vs 3
   `clip_benchmark eval` runs on a local webdataset of the same pairs; Recall@k must match;
c) peak RSS of the embedding step at two dataset sizes;
d) float16 storage and draft decoding: their effect on Recall@k;
e) model-only forward time per model (images, texts at full context and trimmed): the floor
   under any tool running the same fp32 forward passes, to read (b) against;
g) the GPU regime, emulated: small open_clip architectures whose forward is nearly free (so
   decoding and per-job start-up decide, as on a GPU), sharing one 224 px transform; the
   workflow vs one `clip_benchmark eval` run per model for 3 and for 7 models, in both orders,
   Recall@k hit counts compared; then the cost of adding one more model to the finished run.

    .venv/bin/python benchmarks/embed.py --pairs 2000 --rss-sizes 2000 20000
    .venv/bin/python benchmarks/embed.py --pairs 1000 --parts g   # the GPU regime alone

Writes `<workdir>/results.json` and prints a Markdown summary for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import open_clip
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from PIL import Image

from vlbench.config import EMBED_JOB_SHAPES
from vlbench.data.canonical import IMAGES_SCHEMA, TEXTS_SCHEMA
from vlbench.data.synthetic import BIOMEDFLICKR_SCHEMA, README, make_caption
from vlbench.embedding.encode import embed_rows
from vlbench.embedding.matrix_files import load_embeddings
from vlbench.embedding.models import load_open_clip
from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_files import Shard
from vlbench.embedding.waves import LoadedModel
from vlbench.report.provenance import read_snakemake_benchmark

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "support"))
from embed_support import embed_with_loaded_model  # noqa: E402  (the tests' helper)

VENV_BIN = Path(sys.executable).parent
MODELS = {"vit-b-32": "ViT-B-32", "vit-b-16": "ViT-B-16", "vit-s-32": "ViT-S-32"}
# (g): vision widths of the cheap architectures (one layer, 32 px patches, 224 px input).
CHEAP_WIDTHS = (32, 48, 64, 80, 96, 112, 128)
# Runs clip_benchmark's own CLI after registering the cheap architectures' configs with
# open_clip (clip_benchmark knows only open_clip's built-in names).
CLIP_BENCHMARK_WITH_CONFIGS = (
    "import sys, open_clip; open_clip.add_model_config(sys.argv[1]); "
    "sys.argv = ['clip_benchmark', *sys.argv[2:]]; "
    "from clip_benchmark.cli import main; sys.exit(main())"
)
K = (1, 5, 10)


def machine() -> dict[str, Any]:
    """CPU, cores, memory and load at the time of the run."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory_kb / 2**20, 1),
        "torch_threads": torch.get_num_threads(),
        "loadavg": os.getloadavg(),
        "torch": torch.__version__,
        "open_clip": open_clip.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def photo_jpeg(seed: int, width: int, height: int, quality: int = 90) -> bytes:
    """A unique photo-like JPEG: smooth colour fields, a few blobs and sensor-like noise."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (max(height // 60, 2), max(width // 60, 2), 3), np.uint8)
    base = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC), np.int16)
    noise = rng.integers(-8, 9, ((height + 1) // 2, (width + 1) // 2, 3), dtype=np.int16)
    noisy = base + noise.repeat(2, axis=0).repeat(2, axis=1)[:height, :width]
    buffer = io.BytesIO()
    Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(
        buffer, format="JPEG", quality=quality
    )
    return buffer.getvalue()


def _photo(args: tuple[int, int, int]) -> bytes:
    return photo_jpeg(*args)


def make_photos(
    count: int, width: int, height: int, seed: int = 0, processes: int = 1
) -> list[bytes]:
    """`count` unique photo-like JPEGs (`photo_jpeg` of seeds seed * 1_000_003 + row), made by
    `processes` processes."""
    jobs = [(seed * 1_000_003 + row, width, height) for row in range(count)]
    if processes <= 1:
        return [_photo(job) for job in jobs]
    with ProcessPoolExecutor(processes) as pool:
        return list(pool.map(_photo, jobs, chunksize=16))


def make_pairs(
    pairs: int, width: int, height: int, seed: int = 0, processes: int = 1
) -> tuple[list, list[str]]:
    """Unique JPEGs (`make_photos`) and captions (made unique by their row number)."""
    rng = np.random.default_rng(seed)
    images = make_photos(pairs, width, height, seed, processes)
    captions = [f"{make_caption(rng)} (slide {row})" for row in range(pairs)]
    return images, captions


def write_hub_source(directory: Path, images: list[bytes], captions: list[str]) -> None:
    """The pairs as a local source in the BioMedFlickr hub layout."""
    rows = len(images)
    keys = [f"{row:06d}" for row in range(rows)]
    columns = {
        "image": [{"bytes": b, "path": f"{k}.jpg"} for b, k in zip(images, keys, strict=True)],
        "caption": captions,
        "caption_raw": captions,
        "title": keys,
        "key": keys,
        "date_uploaded": keys,
        "flickr_id": keys,
        "url": [f"https://example.invalid/{k}.jpg" for k in keys],
        "nsid": keys,
        "category": ["bench"] * rows,
        "tags": [["bench"]] * rows,
        "width": [0] * rows,
        "height": [0] * rows,
    }
    (directory / "data").mkdir(parents=True, exist_ok=True)
    (directory / "README.md").write_text(README.format(split="test", rows=rows, seed=0))
    table = pa.Table.from_pydict(columns, schema=BIOMEDFLICKR_SCHEMA)
    pq.write_table(table, directory / "data" / "test-00000-of-00001.parquet", row_group_size=256)


def write_webdataset(
    directory: Path, images: list[bytes], captions: list[str], shards: int = 1
) -> None:
    """The same pairs as a clip_benchmark retrieval webdataset, in `shards` tar shards (one per
    decode worker: webdataset hands each worker whole shards, and fails with fewer shards than
    workers)."""
    (directory / "test").mkdir(parents=True, exist_ok=True)
    (directory / "dataset_type.txt").write_text("retrieval\n")
    (directory / "test" / "nshards.txt").write_text(f"{shards}\n")
    rows = len(images)
    for shard in range(shards):
        with tarfile.open(directory / "test" / f"{shard}.tar", "w") as tar:
            for row in range(shard * rows // shards, (shard + 1) * rows // shards):
                for suffix, payload in (("jpg", images[row]), ("txt", captions[row].encode())):
                    info = tarfile.TarInfo(f"{row:06d}.{suffix}")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))


def write_canonical(directory: Path, images: list[bytes], captions: list[str]) -> None:
    """The pairs directly in the canonical layout (for in-process measurements)."""
    directory.mkdir(parents=True, exist_ok=True)
    ids = [str(row) for row in range(len(images))]
    nulls = pa.nulls(len(ids), pa.string())
    pq.write_table(
        pa.table([ids, images, nulls], schema=IMAGES_SCHEMA),
        directory / "images.parquet",
        row_group_size=256,
    )
    pq.write_table(
        pa.table([ids, captions, nulls], schema=TEXTS_SCHEMA),
        directory / "texts.parquet",
        row_group_size=256,
    )


def save_checkpoints(directory: Path, names: dict[str, str] = MODELS) -> dict[str, Path]:
    """Seeded random weights of each model, saved as open_clip state dicts."""
    paths = {}
    directory.mkdir(parents=True, exist_ok=True)
    for seed, (key, name) in enumerate(names.items()):
        path = directory / f"{key}.pt"
        if not path.is_file():
            torch.manual_seed(seed)
            model = open_clip.create_model(name, pretrained=None, device="cpu")
            torch.save(model.state_dict(), path)
        paths[key] = path
    return paths


def hit_rate(queries: np.ndarray, gallery: np.ndarray, k: int) -> float:
    """Recall@k (hit rate) for 1-to-1 pairs: row i of queries pairs row i of the gallery."""
    scores = queries.astype(np.float32) @ gallery.astype(np.float32).T
    own = scores[np.arange(len(scores)), np.arange(len(scores))]
    above = (scores > own[:, None]).sum(axis=1)
    return float((above < k).mean())


def recalls(images: np.ndarray, texts: np.ndarray) -> dict[str, float]:
    """i2t and t2i hit rates at every k."""
    out = {}
    for k in K:
        out[f"i2t@{k}"] = hit_rate(images, texts, k)
        out[f"t2i@{k}"] = hit_rate(texts, images, k)
    return out


def bench_throughput(
    data: Path, checkpoint: Path, images: int, batch: int, workers: int, work: Path
) -> dict[str, Any]:
    """(a) pipeline images/s vs model-only forward, ViT-B-32, same batches."""
    model = load_open_clip({"name": "ViT-B-32", "pretrained": str(checkpoint)})
    source = data / "images.parquet"
    base = {"batch_size": batch, "num_workers": workers}
    results: dict[str, Any] = {"images": images, "batch_size": batch, "num_workers": workers}
    decoded = []
    for begin in range(0, images, batch):
        table = pq.read_table(source).slice(begin, min(batch, images - begin))
        decoded.append(
            torch.stack(
                [
                    model.preprocess(Image.open(io.BytesIO(b)).convert("RGB"))
                    for b in table.column("image").to_pylist()
                ]
            )
        )
    model.encode_images(decoded[0][:2])
    began = time.perf_counter()
    for pixels in decoded:
        model.encode_images(pixels)
    results["model_only_images_per_s"] = images / (time.perf_counter() - began)
    runs = {
        "pipeline_decode_images_per_s": {"pixel_cache": False},
        "pipeline_cold_cache_images_per_s": {"pixel_cache": True},
        "pipeline_warm_cache_images_per_s": {"pixel_cache": True},
        "pipeline_draft_decode_images_per_s": {"pixel_cache": False, "draft_decode": True},
    }
    for label, changes in runs.items():
        settings = EmbedSettings.from_config(base, **changes)
        shard = Shard("image", source, 0, 0, images, pixel_folder=work / "pixels-a" / "a")
        began = time.perf_counter()
        embed_rows(LoadedModel.of(model, {}, settings), shard, settings)
        results[label] = images / (time.perf_counter() - began)
    for label in list(results):
        if label.startswith("pipeline"):
            results[label.replace("images_per_s", "vs_model_only")] = (
                results[label] / results["model_only_images_per_s"]
            )
    results["decode_only"] = bench_decode(source, model, min(images, 64))
    return results


def forward_ms_per_item(
    model: Any, images: list[bytes], texts: list[str], batch: int
) -> dict[str, float]:
    """Milliseconds per item of the bare forward: images, texts full-context and trimmed."""
    pixels = torch.stack(
        [model.preprocess(Image.open(io.BytesIO(blob)).convert("RGB")) for blob in images]
    )
    model.encode_images(pixels[:2])
    model.encode_texts(texts[:2])
    passes = {
        "image": lambda chunk: model.encode_images(pixels[chunk]),
        "text_full_context": lambda chunk: model.encode_texts(texts[chunk], False),
        "text_trimmed": lambda chunk: model.encode_texts(texts[chunk], True),
    }
    timing = {}
    for label, run in passes.items():
        began = time.perf_counter()
        for start in range(0, len(images), batch):
            run(slice(start, start + batch))
        timing[label] = (time.perf_counter() - began) / len(images) * 1000
    return timing


def bench_forward_floor(
    data: Path, checkpoints: dict[str, Path], items: int, batch: int, pairs: int
) -> dict[str, Any]:
    """(e) model-only forward time per model: images, texts at full context, texts trimmed.

    No decoding, no files, no process start-up: the floor under any tool that runs the same
    fp32 forward passes over `pairs` pairs. Decoding each image once comes on top.
    """
    images = pq.read_table(data / "images.parquet").slice(0, items).column("image").to_pylist()
    texts = pq.read_table(data / "texts.parquet").slice(0, items).column("text").to_pylist()
    out: dict[str, Any] = {"items": items, "batch_size": batch, "pairs": pairs}
    floor = 0.0
    for key, path in checkpoints.items():
        model = load_open_clip({"name": MODELS[key], "pretrained": str(path)})
        timing = forward_ms_per_item(model, images, texts, batch)
        out[key] = timing
        floor += pairs * (timing["image"] + timing["text_trimmed"]) / 1000
    out["floor_seconds"] = floor
    return out


def bench_decode(source: Path, model: Any, images: int) -> dict[str, float]:
    """Decode + geometric transform alone: full vs draft JPEG decoding, images/s."""
    from vlbench.embedding.image_transform import ImagePipeline
    from vlbench.embedding.loader import decode_image

    pipeline = ImagePipeline.from_model(model)
    blobs = pq.read_table(source).slice(0, images).column("image").to_pylist()
    out = {}
    for label, size in (("full", None), ("draft", pipeline.draft_size())):
        began = time.perf_counter()
        for blob in blobs:
            pipeline.to_pixels(decode_image(blob, "x", source, size))
        out[f"{label}_images_per_s"] = images / (time.perf_counter() - began)
    return out


def workflow_config(
    source: Path,
    checkpoints: dict[str, Path],
    batch: int,
    workers: int | None,
    names: dict[str, str] = MODELS,
    config_dir: Path | None = None,
    **embedding: Any,
) -> str:
    """A vlbench config evaluating the checkpoints on the local source.

    `config_dir`: where the architectures' open_clip config files are (`<name>.json`), for
    names open_clip does not ship.
    """
    models = "".join(
        f"  {key}:\n    name: {names[key]}\n    pretrained: {path}\n"
        + (f"    model_config: {config_dir / names[key]}.json\n" if config_dir else "")
        for key, path in checkpoints.items()
    )
    extra = "".join(f"  {key}: {value}\n" for key, value in embedding.items())
    return (
        f"models:\n{models}benchmarks:\n  pairs:\n    protocol: paired\n"
        f"    source:\n      path: {source}\n      split: test\n    k: [1, 5, 10]\n"
        f"embedding:\n  batch_size: {batch}\n"
        f"  num_workers: {'null' if workers is None else workers}\n{extra}"
    )


def session_processes(session: int) -> list[str]:
    """The command lines of the live processes of a session (by /proc)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if int(stat[4]) == session and stat[0] != "Z":
            found.append(command.decode().strip())
    return found


def settle(seconds: float = 5.0) -> None:
    """Flush what the set-up wrote (about 1.3 GB of sources) and let the disk go quiet, so the
    first timed run of either tool does not share the disk with that write-back."""
    os.sync()
    time.sleep(seconds)


def run_vlbench(run_dir: Path, config: str, fresh: bool = True, cores: int = 2) -> float:
    """Run the workflow up to its metrics table (in a fresh directory unless `fresh` is False,
    then on what is there); return wall seconds.

    Each run is a session of its own and must leave no process of it alive, so every run
    starts as a first run on a machine does, with nothing of an earlier run kept warm.
    """
    if fresh:
        shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(config)
    command = [
        str(VENV_BIN / "snakemake"),
        "--snakefile", str(REPO / "Snakefile"),
        "--directory", str(run_dir),
        "--configfile", str(run_dir / "config.yaml"),
        "--cores", str(cores), "results/tables/metrics.csv",
    ]  # fmt: skip
    began = time.perf_counter()
    with open(run_dir / "snakemake.log", "w") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        if process.wait() != 0:
            raise subprocess.CalledProcessError(process.returncode, command)
    seconds = time.perf_counter() - began
    left = session_processes(process.pid)
    if left:
        raise RuntimeError(f"processes of the run outlived it: {left}")
    return seconds


DIRECTION_NAMES = {"image_to_text": "i2t", "text_to_image": "t2i"}


def rule_seconds(run_dir: Path) -> dict[str, float]:
    """Seconds per job from the workflow's `benchmark:` files, by rule (embedding jobs by
    model: `embed/<model>`)."""
    out: dict[str, float] = {}
    for path in sorted((run_dir / "results" / "timings").rglob("*.tsv")):
        parts = path.relative_to(run_dir / "results" / "timings").parts
        key = "/".join(parts[:2]) if parts[0] == "embed" else parts[0]
        out[key] = round(out.get(key, 0.0) + read_snakemake_benchmark(path)["s"], 2)
    return out


def vlbench_recalls(run_dir: Path) -> dict[str, dict[str, float]]:
    """Recall@k (hit rate, as a fraction) per model from the workflow's metrics table."""
    table = pl.read_csv(run_dir / "results" / "tables" / "metrics.csv")
    out: dict[str, dict[str, float]] = {}
    for row in table.filter(pl.col("metric") == "recall").iter_rows(named=True):
        key = f"{DIRECTION_NAMES[row['direction']]}@{int(row['k'])}"
        out.setdefault(row["model"], {})[key] = float(row["value"]) / 100
    return out


def same_hits(ours: dict, theirs: dict, queries: int) -> bool:
    """Whether both tools count the same number of hits for every model, direction and k."""
    return all(
        round(ours[model][key] * queries) == round(value * queries)
        for model, values in theirs.items()
        for key, value in values.items()
        if key != "seconds"
    )


def run_clip_benchmark(
    wds: Path,
    checkpoints: dict[str, Path],
    batch: int,
    workers: int,
    out_dir: Path,
    names: dict[str, str] = MODELS,
    config_dir: Path | None = None,
) -> tuple[float, dict[str, dict[str, float]]]:
    """One `clip_benchmark eval` run per model; total wall seconds and Recall@k per model."""
    out_dir.mkdir(parents=True, exist_ok=True)
    total = 0.0
    metrics: dict[str, Any] = {}
    launcher = [str(VENV_BIN / "clip_benchmark")]
    if config_dir is not None:
        launcher = [sys.executable, "-c", CLIP_BENCHMARK_WITH_CONFIGS, str(config_dir)]
    for key, path in checkpoints.items():
        output = out_dir / f"{key}.json"
        command = [
            *launcher, "eval",
            "--dataset", "wds/pairs", "--dataset_root", str(wds),
            "--task", "zeroshot_retrieval",
            "--model", names[key], "--pretrained", str(path),
            "--batch_size", str(batch), "--num_workers", str(workers),
            "--no_amp", "--recall_k", *map(str, K), "--output", str(output),
        ]  # fmt: skip
        began = time.perf_counter()
        with open(out_dir / f"{key}.log", "w") as log:
            subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
        seconds = time.perf_counter() - began
        total += seconds
        raw = json.loads(output.read_text())["metrics"]
        metrics[key] = {
            "seconds": round(seconds, 2),
            **{f"t2i@{k}": raw[f"image_retrieval_recall@{k}"] for k in K},
            **{f"i2t@{k}": raw[f"text_retrieval_recall@{k}"] for k in K},
        }
    return total, metrics


def save_cheap_models(directory: Path, count: int) -> tuple[dict[str, Path], dict[str, str]]:
    """`count` cheap architectures: open_clip config files and seeded random checkpoints.

    One transformer layer at 32 px patches on 224 px images, 64-wide text tower: the forward
    is a few milliseconds per batch, so decoding and start-up decide the wall time.
    """
    directory.mkdir(parents=True, exist_ok=True)
    names = {}
    for width in CHEAP_WIDTHS[:count]:
        name = f"vlbench-cheap-{width}"
        config = {
            "embed_dim": 64,
            "vision_cfg": {"image_size": 224, "layers": 1, "width": width, "head_width": 16,
                           "patch_size": 32},
            "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2,
                         "layers": 1},
        }  # fmt: skip
        (directory / f"{name}.json").write_text(json.dumps(config, indent=1))
        names[f"cheap-{width}"] = name
    open_clip.add_model_config(directory)
    return save_checkpoints(directory, names), names


def bench_gpu_regime(
    work: Path,
    model_counts: list[int],
    batch: int,
    workers: int,
    pairs: int,
    embed_jobs: str = "auto",
) -> dict[str, Any]:
    """(g) cheap-forward models: the workflow vs one clip_benchmark run per model.

    Both tools get the same decode workers: clip_benchmark `--num_workers workers`, the
    workflow `embedding.num_workers: workers`. Each count runs twice, once in each order.
    Then one more architecture is added to the finished 3-model run and timed against a
    clip_benchmark run of that model alone. `embed_jobs`: the workflow's embedding.jobs.
    """
    config_dir = work / "cheap-models"
    checkpoints, names = save_cheap_models(config_dir, max(max(model_counts), 4))
    settle()
    keys = list(checkpoints)
    out: dict[str, Any] = {
        "pairs": pairs, "workers": workers, "batch_size": batch, "embed_jobs": embed_jobs,
    }  # fmt: skip
    shape = {"threads": 1, "jobs": embed_jobs}
    for count in model_counts:
        chosen = {key: checkpoints[key] for key in keys[:count]}
        # One decode worker per job, one thread: two jobs at once on two cores.
        config = workflow_config(work / "hub", chosen, batch, workers, names, config_dir, **shape)
        samples = []
        run_dir, clip_dir = work / f"g-vlbench-{count}", work / f"g-clip-{count}"
        for clip_first in (False, True):
            sample: dict[str, Any] = {
                "order": "clip_benchmark first" if clip_first else "vlbench first",
                "loadavg_before": os.getloadavg(),
            }
            for tool in ("clip", "vlbench") if clip_first else ("vlbench", "clip"):
                if tool == "vlbench":
                    sample["vlbench_seconds"] = run_vlbench(run_dir, config)
                else:
                    sample["clip_benchmark_seconds"], theirs = run_clip_benchmark(
                        work / "wds", chosen, batch, workers, clip_dir, names, config_dir
                    )
            sample["speedup"] = sample["clip_benchmark_seconds"] / sample["vlbench_seconds"]
            sample["recall_identical"] = same_hits(vlbench_recalls(run_dir), theirs, pairs)
            sample["vlbench_rule_seconds"] = rule_seconds(run_dir)
            sample["loadavg_after"] = os.getloadavg()
            samples.append(sample)
            print(json.dumps(sample, indent=1), flush=True)
        out[f"{count}_models"] = samples
    # A 4th model added to the finished 3-model directory, against clip_benchmark on it alone.
    run_dir = work / "g-vlbench-3"
    extra = keys[3]
    four = {key: checkpoints[key] for key in keys[:4]}
    before = model_files(run_dir, keys[:3])
    added = run_vlbench(run_dir, workflow_config(work / "hub", four, batch, workers, names,
                                                 config_dir, **shape), fresh=False)  # fmt: skip
    after = model_files(run_dir, keys[:3])
    alone, theirs = run_clip_benchmark(
        work / "wds", {extra: checkpoints[extra]}, batch, workers, work / "g-clip-added",
        names, config_dir,
    )  # fmt: skip
    out["add_a_model"] = {
        "model": extra,
        "vlbench_seconds": added,
        "clip_benchmark_seconds": alone,
        "ratio": added / alone,
        "recall_identical": same_hits(vlbench_recalls(run_dir), theirs, pairs),
        # Files of the three other models (matrices, shard lists, indexes, ranks, metrics)
        # whose bytes or modification time the added model's run changed.
        "other_models_files": len(before),
        "other_models_bytes_changed": sorted(p for p in before if after[p][1] != before[p][1]),
        "other_models_times_changed": sorted(p for p in before if after[p][0] != before[p][0]),
    }
    print(json.dumps(out["add_a_model"], indent=1), flush=True)
    return out


def model_files(run_dir: Path, models: list[str]) -> dict[str, tuple[int, str]]:
    """(modification time, sha256) of every file the workflow keeps for `models` outside their
    shards' resume folders: matrices, shard lists, indexes, ranks, metrics."""
    found = {}
    for stage in ("embeddings", "index", "ranks", "metrics"):
        for model in models:
            for path in sorted((run_dir / "results" / stage / model).rglob("*")):
                if path.is_file() and "shards" not in path.parent.parts[-3:]:
                    digest = hashlib.sha256(path.read_bytes()).hexdigest()
                    found[str(path.relative_to(run_dir))] = (path.stat().st_mtime_ns, digest)
    return found


def bench_rss(work: Path, sizes: list[int], width: int, height: int) -> dict[str, Any]:
    """(c) peak RSS of the embedding step (all shards + gather, one process) per dataset size.

    A fresh pixel cache each time, so every image is decoded; VmHWM of the child process.
    """
    pool, captions = make_pairs(64, width, height, seed=7)
    out: dict[str, Any] = {"image_size": [width, height]}
    for size in sizes:
        data = work / f"rss-{size}"
        if not (data / "images.parquet").is_file():
            write_canonical(data, [pool[i % len(pool)] for i in range(size)], [captions[0]] * size)
        for stale in ("pixels", "emb"):
            shutil.rmtree(data / stale, ignore_errors=True)
        code = (
            "import sys, time; from pathlib import Path\n"
            "sys.path.insert(0, str(Path(sys.argv[1]) / 'tests' / 'support'))\n"
            "from embed_support import tiny_model\n"
            "from vlbench.embedding.encode import peak_rss_mb\n"
            "from embed_support import embed_with_loaded_model\n"
            "from vlbench.embedding.settings import EmbedSettings\n"
            "d = Path(sys.argv[2]); m = tiny_model()\n"
            "s = EmbedSettings.from_config(batch_size=64, shard_size=10000)\n"
            "t = time.perf_counter()\n"
            "embed_with_loaded_model(m, {'name': 'tiny'}, d / 'images.parquet', 'image', s,"
            " d / 'emb', d / 'pixels' / 'rss')\n"
            "print(time.perf_counter() - t, peak_rss_mb())\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code, str(REPO), str(data)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        seconds, rss = map(float, result.stdout.split()[-2:])
        out[str(size)] = {"peak_rss_mb": rss, "seconds": seconds}
    first, last = str(sizes[0]), str(sizes[-1])
    out["ratio"] = out[last]["peak_rss_mb"] / out[first]["peak_rss_mb"]
    return out


def bench_storage_and_draft(
    run_dir: Path, data: Path, checkpoint: Path, batch: int, work: Path, demo: Path | None
) -> dict[str, Any]:
    """(d) Recall@k with float32 vs float16-rounded embeddings, and with draft decoding."""
    out: dict[str, Any] = {"float16": {}, "draft": {}}
    stems = [(f"bench/{p.name}", p / "pairs") for p in (run_dir / "results/embeddings").iterdir()]
    if demo is not None:
        stems += [(f"demo/{p.name}", p / "synthetic-biomedflickr")
                  for p in (demo / "results/embeddings").iterdir()]  # fmt: skip
    for label, stem in stems:
        images = load_embeddings(stem / "image.npy", stem / "image.ids.parquet")[0]
        texts = load_embeddings(stem / "text.npy", stem / "text.ids.parquet")[0]
        exact = recalls(images, texts)
        half = [m.astype(np.float16).astype(np.float32) for m in (images, texts)]
        rounded = recalls(*half)
        out["float16"][label] = {"float32": exact, "float16": rounded}
    model = load_open_clip({"name": "ViT-B-32", "pretrained": str(checkpoint)})
    stem = run_dir / "results/embeddings/vit-b-32/pairs"
    texts = load_embeddings(stem / "text.npy", stem / "text.ids.parquet")[0]
    images = load_embeddings(stem / "image.npy", stem / "image.ids.parquet")[0]
    settings = EmbedSettings.from_config(
        batch_size=batch, pixel_cache=False, draft_decode=True, shard_size=10**9
    )
    began = time.perf_counter()
    path = embed_with_loaded_model(
        model, {"name": "ViT-B-32"}, data / "images.parquet", "image", settings, work / "draft"
    )
    out["draft"]["seconds"] = time.perf_counter() - began
    drafted = load_embeddings(path, path.with_name("image.ids.parquet"))[0]
    out["draft"]["vit-b-32"] = {"full": recalls(images, texts), "draft": recalls(drafted, texts)}
    out["draft"]["max_abs_embedding_difference"] = float(np.abs(drafted - images).max())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--width", type=int, default=1600)
    parser.add_argument("--height", type=int, default=1300)
    parser.add_argument("--forward-images", type=int, default=256)
    parser.add_argument("--rss-sizes", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--rss-width", type=int, default=1600)
    parser.add_argument("--rss-height", type=int, default=1300)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-workers", type=int, default=1)
    parser.add_argument("--cores", type=int, default=2, help="(b): the workflow's --cores")
    parser.add_argument("--demo", type=Path, help="a finished demo-config run directory")
    parser.add_argument("--workdir", type=Path, default=REPO / "benchmarks/runs/embed")
    parser.add_argument("--parts", default="abcdeg")
    parser.add_argument("--regime-models", type=int, nargs="+", default=[3, 7])
    parser.add_argument(
        "--embed-jobs",
        default="auto",
        choices=EMBED_JOB_SHAPES,
        help="(g): the workflow's embedding.jobs",
    )
    parser.add_argument(
        "--clip-first", action="store_true", help="(b): run clip_benchmark before the workflow"
    )
    args = parser.parse_args()
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    previous = work / "results.json"
    results: dict[str, Any] = json.loads(previous.read_text()) if previous.is_file() else {}
    results[f"machine_start_{args.parts}"] = machine()
    results[f"args_{args.parts}"] = vars(args) | {"demo": str(args.demo), "workdir": str(work)}
    began = time.perf_counter()
    images, captions = make_pairs(args.pairs, args.width, args.height, processes=args.cores)
    results["jpeg_kib_mean"] = float(np.mean([len(b) for b in images]) / 1024)
    results["setup_seconds"] = time.perf_counter() - began
    write_canonical(work / "canonical", images, captions)
    write_hub_source(work / "hub", images, captions)
    write_webdataset(work / "wds", images, captions, shards=max(args.num_workers, 1))
    checkpoints = save_checkpoints(work / "checkpoints")
    del images, captions
    settle()
    batch, workers = args.batch_size, args.num_workers
    if "a" in args.parts:
        results["a"] = bench_throughput(
            work / "canonical", checkpoints["vit-b-32"], min(args.forward_images, args.pairs),
            batch, workers, work,
        )  # fmt: skip
        print(json.dumps(results["a"], indent=1), flush=True)
    run_dir = work / "vlbench-run"
    if "b" in args.parts:
        config = workflow_config(work / "hub", checkpoints, batch, workers)
        clip_dir = work / "clip_benchmark"
        if args.clip_first:
            theirs_seconds, theirs = run_clip_benchmark(
                work / "wds", checkpoints, batch, workers, clip_dir
            )
        seconds = run_vlbench(run_dir, config, cores=args.cores)
        ours = vlbench_recalls(run_dir)
        if not args.clip_first:
            theirs_seconds, theirs = run_clip_benchmark(
                work / "wds", checkpoints, batch, workers, clip_dir
            )
        key = "b_clip_first" if args.clip_first else "b"
        results[key] = {
            "vlbench_seconds": seconds,
            "clip_benchmark_seconds": theirs_seconds,
            "speedup": theirs_seconds / seconds,
            "vlbench_rule_seconds": rule_seconds(run_dir),
            "vlbench_recall": ours,
            "clip_benchmark_recall": theirs,
            "recall_identical": same_hits(ours, theirs, args.pairs),
        }
        print(json.dumps(results[key], indent=1), flush=True)
    if "c" in args.parts:
        results["c"] = bench_rss(work, args.rss_sizes, args.rss_width, args.rss_height)
        print(json.dumps(results["c"], indent=1), flush=True)
    if "d" in args.parts:
        results["d"] = bench_storage_and_draft(
            run_dir, work / "canonical", checkpoints["vit-b-32"], batch, work, args.demo
        )
        print(json.dumps(results["d"], indent=1), flush=True)
    if "e" in args.parts:
        results["e"] = bench_forward_floor(
            work / "canonical", checkpoints, min(args.forward_images, args.pairs), batch,
            args.pairs,
        )  # fmt: skip
        if "b" in results:
            results["e"]["clip_benchmark_seconds_over_floor"] = (
                results["b"]["clip_benchmark_seconds"] / results["e"]["floor_seconds"]
            )
        print(json.dumps(results["e"], indent=1), flush=True)
    if "g" in args.parts:
        results["g"] = bench_gpu_regime(
            work, args.regime_models, batch, workers, args.pairs, args.embed_jobs
        )
    results[f"machine_end_{args.parts}"] = machine()
    results[f"total_seconds_{args.parts}"] = time.perf_counter() - began
    (work / "results.json").write_text(json.dumps(results, indent=2))
    print(f"wrote {work / 'results.json'}")


if __name__ == "__main__":
    main()
