"""GPU part of the embedding benchmark (a): pipeline images/s vs model-only forward, bf16.

Random-weight ViT-L-14 (no download) at bf16 on synthetic photo-like JPEGs (1600 x 1300,
quality 90). Model-only forward runs on pre-decoded tensors already on the GPU; the pipeline
reads the canonical parquet by row group through DataLoader workers (pinned memory), with the
pixel cache off (every image decoded), cold, then warm (pixels read back from the cache), and
with draft JPEG decoding (cache off).
Target: pipeline >= 80% of model-only. Sized to finish in under 5 minutes on one H100/H200:

    python benchmarks/embed_gpu.py --images 2048 --workers 14

Prints one JSON object and writes it to `<workdir>/results_gpu.json`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from pathlib import Path

import open_clip
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))

from embed import make_photos

from vlbench.data.canonical import IMAGES_SCHEMA
from vlbench.embedding.encode import embed_rows
from vlbench.embedding.models import load_open_clip
from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_files import Shard
from vlbench.embedding.waves import LoadedModel


def preprocess_batch(model, blobs: list[bytes]) -> torch.Tensor:
    """The reference decode + preprocess of a batch of encoded images."""
    return torch.stack([model.preprocess(Image.open(io.BytesIO(b)).convert("RGB")) for b in blobs])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="ViT-L-14")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=max((os.cpu_count() or 2) - 2, 1))
    parser.add_argument("--width", type=int, default=1600)
    parser.add_argument("--height", type=int, default=1300)
    parser.add_argument("--workdir", type=Path, default=Path("benchmarks/runs/embed_gpu"))
    args = parser.parse_args()
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    images = make_photos(args.images, args.width, args.height, processes=args.workers)
    source = work / "images.parquet"
    ids = [str(i) for i in range(args.images)]
    table = pa.table([ids, images, pa.nulls(len(ids), pa.string())], schema=IMAGES_SCHEMA)
    pq.write_table(table, source, row_group_size=256)
    setup = time.perf_counter() - began

    checkpoint = work / f"{args.model}.pt"
    torch.manual_seed(0)
    torch.save(open_clip.create_model(args.model, pretrained=None).state_dict(), checkpoint)
    model = load_open_clip(
        {"name": args.model, "pretrained": str(checkpoint), "precision": args.precision}
    )
    device = model.device

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    batches = [
        preprocess_batch(model, images[i : i + args.batch_size]).to(device)
        for i in range(0, min(args.images, 4 * args.batch_size), args.batch_size)
    ]
    for pixels in batches[:2]:
        model.encode_images(pixels)
    synchronize()
    start = time.perf_counter()
    rounds = max(args.images // (len(batches) * args.batch_size), 1)
    for _ in range(rounds):
        for pixels in batches:
            model.encode_images(pixels)
    synchronize()
    model_only = rounds * sum(len(b) for b in batches) / (time.perf_counter() - start)
    del batches

    results = {
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "model": args.model,
        "precision": args.precision,
        "images": args.images,
        "batch_size": args.batch_size,
        "workers": args.workers,
        "cpu_cores": os.cpu_count(),
        "setup_seconds": setup,
        "model_only_images_per_s": model_only,
    }
    passes = (
        ("decode", False, False),
        ("cold_cache", True, False),
        ("warm_cache", True, False),
        ("draft_decode", False, True),  # JPEG draft decoding (DCT-domain downscale), cache off
    )
    for label, cache, draft in passes:
        settings = EmbedSettings.from_config(
            batch_size=args.batch_size, num_workers=args.workers, pixel_cache=cache,
            draft_decode=draft,
        )  # fmt: skip
        shard = Shard("image", source, 0, 0, args.images, pixel_folder=work / "pixels" / "gpu")
        synchronize()
        start = time.perf_counter()
        embed_rows(LoadedModel.of(model, {}, settings), shard, settings)
        synchronize()
        rate = args.images / (time.perf_counter() - start)
        results[f"pipeline_{label}_images_per_s"] = rate
        results[f"pipeline_{label}_vs_model_only"] = rate / model_only
    text = json.dumps(results, indent=2)
    (work / "results_gpu.json").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
