"""The shared demo run's report: paper table, plots and provenance in `snakemake --report` HTML."""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import json
import re
from pathlib import Path

import numpy as np
import polars as pl

from vlbench.embedding.matrix_files import MatrixFiles, save_embeddings
from vlbench.embedding.shard_files import gather_shards
from vlbench.metrics.rows import METRIC_COLUMNS
from vlbench.report.provenance import (
    collect_provenance,
    provenance_html,
    timing_rows,
    write_provenance,
)

BENCHMARK = "demo"
EMBEDDED = re.compile(
    r'data:(?P<mime>[^;"]+)(?:;[^;,"]*)*?;filename=(?P<name>[^;,"]+);base64,(?P<data>[A-Za-z0-9+/=]+)'
)


def embedded_files(report: Path) -> dict[str, list[bytes]]:
    """The files a self-contained Snakemake HTML report carries, by file name."""
    files: dict[str, list[bytes]] = {}
    for match in EMBEDDED.finditer(report.read_text(encoding="utf-8")):
        files.setdefault(match["name"], []).append(base64.b64decode(match["data"]))
    return files


def hit_rate(ranks: Path, k: int) -> float:
    """Recall@k recomputed from the per-query ranks: a hit when the best relevant rank <= k."""
    best = pl.read_parquet(ranks).group_by("query_id").agg(pl.col("rank").min())["rank"]
    return 100.0 * float((best <= k).mean())


def test_report_holds_the_paper_table_with_our_cells_and_the_chance_flag(demo_run: Path) -> None:
    files = embedded_files(demo_run / "results" / "report.html")
    table = files["biomedflickr.html"][0].decode("utf-8")
    assert "tiny" in table
    assert "chance level (ours)" in table
    ranks = demo_run / "results" / "ranks" / "tiny" / BENCHMARK
    # The notebook's I2T is text->image; T2I is image->text. Published cells stay empty.
    for label, direction in (("I2T", "text_to_image"), ("T2I", "image_to_text")):
        for k in (1, 10):
            value = hit_rate(ranks / f"{direction}.parquet", k)
            assert f"{value:.2f} / – / –" in table, (label, k)
    assert "published: false" in table


def test_report_holds_plots_and_examples(demo_run: Path) -> None:
    files = embedded_files(demo_run / "results" / "report.html")
    for name in ("recall_at_k.png", "model_bars.png", "image_to_text.png", "text_to_image.png"):
        assert files[name][0].startswith(b"\x89PNG\r\n\x1a\n"), name


def test_report_holds_provenance(demo_run: Path) -> None:
    files = embedded_files(demo_run / "results" / "report.html")
    pages = [page.decode("utf-8") for page in files[f"{BENCHMARK}.html"]]
    provenance = next(page for page in pages if "Provenance" in page)
    weights = hashlib.sha256((demo_run / "results/checkpoints/tiny.pt").read_bytes()).hexdigest()
    assert weights in provenance
    for expected in ("synthetic", "fp32", "<td>64</td>", "cpu", "embed", "evaluate"):
        assert expected in provenance, expected
    assert importlib.metadata.version("open_clip_torch") in provenance
    metrics = next(page for page in pages if "Provenance" not in page)
    assert "chance" in metrics


def test_tables_keep_the_contract_and_all_formats(demo_run: Path) -> None:
    tables = demo_run / "results" / "tables"
    with open(tables / "metrics.csv", encoding="utf-8") as handle:
        assert next(csv.reader(handle)) == METRIC_COLUMNS
    with open(tables / "metrics_full.csv", encoding="utf-8") as handle:
        header = next(csv.reader(handle))
    assert header[: len(METRIC_COLUMNS)] == METRIC_COLUMNS and "chance" in header
    for extension in ("md", "csv", "tex", "html"):
        assert (tables / "paper" / f"biomedflickr.{extension}").stat().st_size > 0


def test_provenance_reads_jobs_and_timings_of_one_benchmark(tmp_path: Path) -> None:
    meta = tmp_path / "benchmark.json"
    meta.write_text(json.dumps({"source": "hub", "repo": "o/r", "revision": "a" * 40}))
    record = tmp_path / "emb" / "m1" / "b" / "image.json"
    record.parent.mkdir(parents=True)
    record.write_text(
        json.dumps(
            {
                "model": {"name": "ViT-B-16", "pretrained": "openai"},
                "weights_sha256": "f" * 64,
                "precision": "bf16",
                "device": "cuda:0",
                "batch_size": 256,
                "seconds": 12.5,
                "versions": {"torch": "9.9"},
            }
        )
    )
    timings = tmp_path / "timings"
    files = []
    for relative, seconds in (
        ("embed/m1/b.tsv", "3.5"),
        ("evaluate/m1/b.tsv", "0.5"),
        ("prepare_benchmark/b.tsv", "1.0"),
    ):
        path = timings / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"s\th:m:s\tmax_rss\n{seconds}\t0:00:03\t100.5\n")
        files.append(path)
    rows = timing_rows(files, timings)
    assert [(row["rule"], row["job"], row["seconds"]) for row in rows] == [
        ("embed", "m1/b", 3.5),
        ("evaluate", "m1/b", 0.5),
        ("prepare_benchmark", "b", 1.0),
    ]
    collected = collect_provenance("b", meta, [record], files, timings)
    assert collected["embeddings"][0]["model_key"] == "m1"
    assert collected["embeddings"][0]["torch"] == "9.9"
    page = provenance_html(collected)
    assert "a" * 40 in page and "f" * 64 in page and "bf16" in page and "256" in page


def gathered_embedding(directory: Path, places: list[tuple[str, str, str]]) -> Path:
    """A gathered <modality>.json written by the gather, one shard per (host, device, name)."""
    shards, records = [], []
    for index, (host, device, device_name) in enumerate(places):
        files = MatrixFiles.at(directory / "shards" / "image" / f"shard-{index:05d}")
        files.embeddings.parent.mkdir(parents=True, exist_ok=True)
        ids = [f"img-{index}-{row}" for row in range(2)]
        save_embeddings(ids, np.eye(2, 4, dtype=np.float32), files.embeddings, files.ids)
        records.append(
            {
                "model": {"name": "ViT-B-16", "pretrained": "openai"},
                "weights_sha256": "f" * 64,
                "precision": "bf16",
                "device": device,
                "device_name": device_name,
                "host": host,
                "batch_size": 256,
                "modality": "image",
                "rows": [2 * index, 2 * index + 2],
                "seconds": 1.5,
                "versions": {"torch": "9.9"},
            }
        )
        shards.append(files)
    gather_shards(shards, records, MatrixFiles.at(directory / "image"))
    return directory / "image.json"


def test_provenance_csv_takes_device_and_host_from_the_gathered_shards(tmp_path: Path) -> None:
    meta = tmp_path / "benchmark.json"
    meta.write_text(json.dumps({"source": "hub", "repo": "o/r", "revision": "a" * 40}))
    one_place = gathered_embedding(
        tmp_path / "emb" / "m1" / "b", [("node1", "cuda:0", "NVIDIA H100")] * 2
    )
    spread = gathered_embedding(
        tmp_path / "emb" / "m2" / "b",
        [
            ("node1", "cuda:0", "NVIDIA H100"),
            ("node2", "cuda:0", "NVIDIA A100"),
            ("node1", "cuda:1", "NVIDIA H100"),
        ],
    )
    assert "device" not in json.loads(spread.read_text())  # moved under shards[]
    record = collect_provenance("b", meta, [spread, one_place], [])
    write_provenance(record, tmp_path / "b.csv", tmp_path / "b.html")
    with open(tmp_path / "b.csv", encoding="utf-8", newline="") as handle:
        rows = {row["model_key"]: row for row in csv.DictReader(handle)}
    assert (rows["m1"]["device"], rows["m1"]["device_name"], rows["m1"]["host"]) == (
        "cuda:0",
        "NVIDIA H100",
        "node1",
    )
    assert (rows["m2"]["device"], rows["m2"]["device_name"], rows["m2"]["host"]) == (
        "cuda:0;cuda:1",
        "NVIDIA H100;NVIDIA A100",
        "node1;node2",
    )
    assert rows["m2"]["rows"] == "6" and rows["m2"]["precision"] == "bf16"
    assert "NVIDIA H100;NVIDIA A100" in (tmp_path / "b.html").read_text()
