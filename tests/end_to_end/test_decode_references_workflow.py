"""The workflow's numbers equal the references' own runs where decoding differs between them.

One workflow run (default decode policies) over a Flickr-style clip_benchmark webdataset whose
JPEGs partly carry EXIF Orientation=6, and an INQUIRE-Rerank-layout parquet mixing RGB, L, RGBA,
CMYK and palette images. clip_benchmark's own `build_wds_dataset` + `zeroshot_retrieval.evaluate`
gives the same Recall@k hit counts; INQUIRE's evaluation path (`datasets` Image, the open_clip
preprocess on the image as it is, its per-query AP, nDCG and MRR) gives the same AP, nDCG and MRR,
overall and per supercategory.
"""

from __future__ import annotations

import importlib
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import open_clip
import polars as pl
import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F
import yaml
from fixtures_sources import INQUIRE_SCHEMA, VALUE, card, inquire_rows, write_parquet
from PIL import Image
from workflow_helpers import TINY_MODEL_CONFIG, copy_of_run, run_workflow, tiny_model, write_config

from vlbench.embedding.models import register_model_config

N_IMAGES = 24
KS = [1, 5, 10]
CANDIDATES_PER_QUERY = 10


def _photo(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    """Photo-like content: coarse colour fields upsampled, plus sensor noise."""
    coarse = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
    base = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC), np.int16)
    noisy = base + rng.normal(0, 8, base.shape).astype(np.int16)
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))


def _save(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def write_rotated_wds(root: Path) -> None:
    """`test/0.tar` of (jpg, txt) samples; every fourth JPEG is stored sideways with
    Orientation=6, as phone photos on Flickr often are."""
    rng = np.random.default_rng(7)
    (root / "test").mkdir(parents=True)
    with tarfile.open(root / "test" / "0.tar", "w") as tar:
        for i in range(N_IMAGES):
            options: dict[str, object] = {"quality": 90}
            if i % 4 == 0:
                exif = Image.Exif()
                exif[0x0112] = 6
                options["exif"] = exif
            data = _save(_photo(rng, 96, 64), "JPEG", **options)
            captions = "\n".join(
                f"photo {i} caption {c}: a scene number {i * 7 + c}" for c in range(5)
            )
            for name, payload in ((f"s{i:05d}.jpg", data), (f"s{i:05d}.txt", captions.encode())):
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    (root / "test" / "nshards.txt").write_text("1", encoding="utf-8")
    (root / "dataset_type.txt").write_text("retrieval", encoding="utf-8")


def mixed_mode_image(image_id: int) -> bytes:
    """INQUIRE candidates in every mode iNaturalist photos come in."""
    rng = np.random.default_rng(image_id)
    photo = _photo(rng, 80 + image_id % 7 * 5, 60 + image_id % 5 * 6)
    kind = image_id % 5
    if kind == 0:
        return _save(photo.quantize(colors=32), "PNG")
    if kind == 1:
        return _save(photo.convert("CMYK"), "JPEG")
    if kind == 2:
        alpha = Image.linear_gradient("L").resize(photo.size)
        return _save(Image.merge("RGBA", (*photo.split(), alpha)), "PNG")
    if kind == 3:
        return _save(photo.convert("L"), "JPEG")
    return _save(photo, "JPEG")


def write_mixed_inquire(root: Path) -> list[dict]:
    rows = inquire_rows("test", n_queries=6, per_query=CANDIDATES_PER_QUERY, seed=3)
    for row in rows:
        row["image"] = {"bytes": mixed_mode_image(row["inat24_image_id"]), "path": None}
    features = {name: VALUE for name in INQUIRE_SCHEMA.names}
    features["image"] = {"_type": "Image"}
    table = pa.Table.from_pylist(rows, schema=INQUIRE_SCHEMA)
    write_parquet(root / "data" / "test-00000-of-00001.parquet", table, features)
    (root / "README.md").write_text(card([("default", [("test", "data/test-*")])]), "utf-8")
    return rows


# The former behaviour (EXIF applied, RGB first), kept beside the defaults to show that these
# fixtures tell the policies apart.
LEGACY_OVERRIDES = {
    "flickr-wds-legacy": ("flickr-wds", {"exif": True}),
    "inquire-legacy": ("inquire", {"convert": "before"}),
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = tmp_path_factory.mktemp("decode-refs")
    write_rotated_wds(workdir / "wds")
    write_mixed_inquire(workdir / "inquire")
    benchmarks = {
        "flickr-wds": {
            "protocol": "multi_positive",
            "source": {"path": str(workdir / "wds"), "format": "clip_benchmark_wds"},
            "k": KS,
        },
        "inquire": {"protocol": "rerank", "source": {"path": str(workdir / "inquire")}},
    }
    for name, (base, decode) in LEGACY_OVERRIDES.items():
        benchmarks[name] = {**benchmarks[base], "decode": decode}
    config = {
        "models": {"tiny": tiny_model(3)},
        "benchmarks": benchmarks,
        # The references run every text at the full context.
        "embedding": {"trim_text_padding": False},
    }
    configfile = write_config(workdir, config)
    targets = [
        f"results/metrics/tiny/{bench}/{direction}.csv"
        for bench in benchmarks
        for direction in (
            ("text_to_image",) if "inquire" in bench else ("image_to_text", "text_to_image")
        )
    ]
    run_workflow(workdir, configfile, *targets, "--cores", "2")
    return workdir


def reference_model(workdir: Path):
    register_model_config("vlbench-tiny", TINY_MODEL_CONFIG)
    checkpoint = str(workdir / "results" / "checkpoints" / "tiny.pt")
    model, _, preprocess = open_clip.create_model_and_transforms(
        "vlbench-tiny", pretrained=checkpoint, device="cpu"
    )
    return model.eval(), preprocess, open_clip.get_tokenizer("vlbench-tiny")


def metric_rows(workdir: Path, bench: str, direction: str) -> pl.DataFrame:
    return pl.read_csv(workdir / "results" / "metrics" / "tiny" / bench / f"{direction}.csv")


def hits(workdir: Path, bench: str) -> dict[str, dict[int, int]]:
    """Recall@k hit counts per direction (value is a percentage of n_queries)."""
    counts = {}
    for direction in ("image_to_text", "text_to_image"):
        recall = metric_rows(workdir, bench, direction).filter(pl.col("metric") == "recall")
        rows = recall.select("k", "value", "n_queries").rows()
        counts[direction] = {int(k): round(v * n / 100) for k, v, n in rows}
    return counts


@pytest.fixture(scope="module")
def clip_benchmark_hits(finished: Path) -> dict[str, dict[int, int]]:
    """clip_benchmark's own run on the webdataset: its loader, its batching, its recall."""
    builder = importlib.import_module("clip_benchmark.datasets.builder")
    zsr = importlib.import_module("clip_benchmark.metrics.zeroshot_retrieval")
    model, preprocess, tokenizer = reference_model(finished)
    dataset = builder.build_wds_dataset("wds_flickr", preprocess, "test", str(finished / "wds"))
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=64, collate_fn=builder.image_captions_collate_fn
    )
    metrics = zsr.evaluate(model, loader, tokenizer, "cpu", amp=False, recall_k_list=KS)
    # clip_benchmark: "text_retrieval" = image queries -> texts, "image_retrieval" the reverse.
    return {
        "image_to_text": {k: round(metrics[f"text_retrieval_recall@{k}"] * N_IMAGES) for k in KS},
        "text_to_image": {
            k: round(metrics[f"image_retrieval_recall@{k}"] * 5 * N_IMAGES) for k in KS
        },
    }


def inquire_ndcg(relevant: np.ndarray, scores: np.ndarray) -> float:
    """INQUIRE's ndcg_at_k with every positive in the list: sklearn's nDCG over all of it."""
    metrics = importlib.import_module("sklearn.metrics")
    return float(metrics.ndcg_score([relevant], [scores], k=len(relevant)))


def inquire_mrr(relevant: np.ndarray, scores: np.ndarray) -> float:
    """INQUIRE's mrr: walk the reversed stable argsort to the first relevant candidate."""
    order = np.flip(np.argsort(scores))
    return float(1 / (np.flatnonzero(relevant[order] == 1)[0] + 1))


@pytest.fixture(scope="module")
def inquire_reference(finished: Path) -> dict[str, tuple[str, float, float, float]]:
    """INQUIRE's eval_clip_rerank_hf.py: `datasets` Image, preprocess(ex["image"]) as it is,
    one batch of images, each query's text alone, then per query its compute_retrieval_metrics
    (sklearn AP, nDCG over the whole candidate list, MRR) with count_pos = the list's positives.
    Query -> (supercategory, AP %, nDCG %, MRR as a fraction, as INQUIRE prints it)."""
    datasets = importlib.import_module("datasets")
    metrics = importlib.import_module("sklearn.metrics")
    model, preprocess, tokenizer = reference_model(finished)
    files = sorted((finished / "inquire" / "data").glob("test-*.parquet"))
    dataset = datasets.load_dataset("parquet", data_files=[str(f) for f in files], split="train")
    dataset = dataset.cast_column("image", datasets.Image())
    assert {"P", "CMYK", "RGBA", "L", "RGB"} <= {row["image"].mode for row in dataset}
    with torch.no_grad():
        pixels = torch.stack([preprocess(row["image"]) for row in dataset])
        image_embs = F.normalize(model.encode_image(pixels), dim=-1)
    query_of_row = dataset["query"]
    supercategory = dataset["supercategory"]
    relevant = np.asarray(dataset["relevant"])
    reference = {}
    for query in dict.fromkeys(query_of_row):
        rows = [i for i, q in enumerate(query_of_row) if q == query]
        with torch.no_grad():
            text_emb = F.normalize(model.encode_text(tokenizer([query])), dim=-1)[0]
        scores = (image_embs[rows] @ text_emb).numpy()
        reference[query] = (
            supercategory[rows[0]],
            metrics.average_precision_score(relevant[rows], scores) * 100,
            inquire_ndcg(relevant[rows], scores) * 100,
            inquire_mrr(relevant[rows], scores),
        )
    return reference


@pytest.fixture(scope="module")
def inquire_reference_ap(inquire_reference: dict[str, tuple[str, float, float, float]]) -> float:
    return float(np.mean([ap for _, ap, _, _ in inquire_reference.values()]))


def overall_ap(workdir: Path, bench: str) -> float:
    """Our AP over each query's whole candidate list (k empty), all queries."""
    rows = metric_rows(workdir, bench, "text_to_image")
    ap = rows.filter((pl.col("metric") == "average_precision") & pl.col("k").is_null())
    overall = ap.filter(pl.col("n_queries") == pl.col("n_queries").max())
    assert overall.height == 1, ap
    return float(overall["value"][0])


def test_rotated_webdataset_recall_hit_counts_equal_clip_benchmark(
    finished: Path, clip_benchmark_hits
) -> None:
    assert hits(finished, "flickr-wds") == clip_benchmark_hits


def test_mixed_mode_inquire_ap_equals_inquire_reference(
    finished: Path, inquire_reference_ap: float
) -> None:
    assert overall_ap(finished, "inquire") == pytest.approx(inquire_reference_ap, abs=1e-9)
    meta = json.loads((finished / "results" / "data" / "inquire" / "benchmark.json").read_text())
    assert meta["decode_policy"] == {"exif": True, "convert": "after"}


def test_every_mixed_mode_inquire_cell_equals_inquire_reference(
    finished: Path, inquire_reference: dict[str, tuple[str, float, float, float]]
) -> None:
    """AP, nDCG and MRR, overall and per supercategory. INQUIRE's nDCG covers the whole
    candidate list (our nDCG@10 here); its MRR is a fraction where ours is a percentage."""
    groups: dict[str, list[tuple[float, float, float]]] = {"test": []}
    for supercategory, *values in inquire_reference.values():
        groups["test"].append(values)
        groups.setdefault(supercategory, []).append(values)
    assert len(groups) > 2
    ours = metric_rows(finished, "inquire", "text_to_image")
    for subset, values in groups.items():
        ap, ndcg, mrr = np.mean(values, axis=0)
        cells = ours.filter(pl.col("subset") == subset)
        assert cells.height > 0, subset

        def cell(metric: str, k: int | None, cells: pl.DataFrame = cells) -> float:
            hit = cells.filter(pl.col("metric") == metric)
            hit = hit.filter(pl.col("k").is_null() if k is None else pl.col("k") == k)
            assert hit.height == 1, (metric, k, hit)
            return float(hit["value"][0])

        assert cell("average_precision", None) == pytest.approx(ap, abs=1e-9), subset
        assert cell("ndcg", CANDIDATES_PER_QUERY) == pytest.approx(ndcg, abs=1e-9), subset
        assert cell("mrr", None) / 100 == pytest.approx(mrr, abs=1e-12), subset


def test_the_former_decode_would_disagree_with_both_references(
    finished: Path, clip_benchmark_hits, inquire_reference_ap: float
) -> None:
    """EXIF applied on the webdataset, RGB first on INQUIRE: the fixtures catch both."""
    assert hits(finished, "flickr-wds-legacy") != clip_benchmark_hits
    assert overall_ap(finished, "inquire-legacy") != pytest.approx(inquire_reference_ap, abs=1e-9)
    provenance = json.loads(
        (finished / "results" / "embeddings" / "tiny" / "inquire-legacy" / "image.json").read_text()
    )
    assert provenance["decode_policy"] == {"exif": True, "convert": "before"}


def test_changing_the_decode_policy_re_embeds_only_that_benchmarks_images(
    finished: Path, tmp_path: Path
) -> None:
    """`decode` reruns the benchmark's prepare job and its image shards; its text shards and
    every other benchmark's shards are reused, and the numbers become the overridden policy's."""
    workdir = copy_of_run(finished, tmp_path)
    configfile = workdir / "config.yaml"
    config = yaml.safe_load(configfile.read_text(encoding="utf-8"))
    config["benchmarks"]["flickr-wds"]["decode"] = {"exif": True}
    configfile.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    shards = workdir / "results" / "embeddings" / "tiny"
    before = {path: path.stat().st_mtime_ns for path in shards.rglob("shard-*.npy")}
    targets = [
        f"results/metrics/tiny/flickr-wds/{d}.csv" for d in ("image_to_text", "text_to_image")
    ]
    run_workflow(workdir, configfile, *targets, "--cores", "2")
    changed = {
        path.relative_to(shards).as_posix()
        for path, mtime in before.items()
        if path.stat().st_mtime_ns != mtime
    }
    assert changed == {"flickr-wds/shards/image/shard-00000.npy"}
    assert hits(workdir, "flickr-wds") == hits(workdir, "flickr-wds-legacy")
