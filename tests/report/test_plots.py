"""Plots: Recall@k curves, per-model bars and qualitative top-5 examples from a faiss index."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from vlbench.data.canonical import IMAGES_SCHEMA, QRELS_SCHEMA, TEXTS_SCHEMA
from vlbench.embedding.matrix_files import MatrixFiles, save_matrix
from vlbench.rank.index import build_flat_index
from vlbench.report.plots import model_bars, recall_curves, write_benchmark_plots
from vlbench.report.qualitative import (
    pick_queries,
    render_examples,
    search_examples,
    write_examples,
)

KS = [1, 10, 100]


def metrics_frame() -> pl.DataFrame:
    """Two models, two directions, Recall@1/10/100 with CIs and a chance level."""
    rows = []
    values = {"good": [40.0, 70.0, 95.0], "random": [0.5, 3.0, 33.0]}
    for model, model_values in values.items():
        for direction in ("image_to_text", "text_to_image"):
            for k, value in zip(KS, model_values, strict=True):
                rows.append(
                    {
                        "benchmark": "b",
                        "subset": "test",
                        "model": model,
                        "direction": direction,
                        "metric": "recall",
                        "k": k,
                        "value": value,
                        "ci_low": value - 1.0,
                        "ci_high": value + 1.5,
                        "n_queries": 300,
                        "chance": k / 3.0,
                    }
                )
    return pl.DataFrame(rows)


def test_recall_curves_plot_every_model_on_a_log_k_axis() -> None:
    figure = recall_curves(metrics_frame(), "b")
    axes = [axis for axis in figure.axes if axis.get_lines()]
    assert len(axes) == 2
    for axis in axes:
        assert axis.get_xscale() == "log"
        lines = {line.get_label(): line for line in axis.get_lines()}
        assert set(lines) == {"good", "random", "chance"}
        assert list(lines["good"].get_xdata()) == KS
        assert list(lines["good"].get_ydata()) == [40.0, 70.0, 95.0]
        assert list(lines["chance"].get_ydata()) == pytest.approx([k / 3.0 for k in KS])


def test_model_bars_carry_values_and_interval_error_bars() -> None:
    figure = model_bars(metrics_frame(), "b")
    axis = figure.axes[0]
    containers = {container.get_label(): container for container in axis.containers}
    good = containers["good"]
    heights = [patch.get_height() for patch in good.patches]
    assert heights == [40.0, 70.0, 95.0, 40.0, 70.0, 95.0]
    # Error bars span [ci_low, ci_high] around each bar.
    segments = good.errorbar.lines[2][0].get_segments()
    spans = sorted({round(float(seg[1][1] - seg[0][1]), 6) for seg in segments})
    assert spans == [2.5]


def test_benchmark_plots_are_png_files(tmp_path: Path) -> None:
    write_benchmark_plots(metrics_frame(), "b", tmp_path / "c.png", tmp_path / "bars.png")
    for name in ("c.png", "bars.png"):
        with Image.open(tmp_path / name) as image:
            assert image.format == "PNG" and image.width > 300


def test_missing_recall_rows_still_give_a_figure(tmp_path: Path) -> None:
    frame = metrics_frame().with_columns(pl.lit("mrr").alias("metric"))
    figure = recall_curves(frame, "b")
    assert "no Recall@k rows" in figure.axes[0].texts[0].get_text()


def test_picked_queries_are_fixed_and_spread() -> None:
    ids = np.array([f"q{i}" for i in range(10)], dtype=object)
    judged = {f"q{i}" for i in range(10) if i != 0}
    assert pick_queries(ids, judged, 3) == [1, 5, 9]
    assert pick_queries(ids, judged, 0) == []
    assert pick_queries(ids, {"q4"}, 3) == [4]


def _png(colour: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (20, 12), colour).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture
def prepared(tmp_path: Path) -> dict[str, Path]:
    """A 12-pair benchmark whose text vectors are near copies of their image's vector."""
    n, dim = 12, 8
    rng = np.random.default_rng(0)
    images = rng.normal(size=(n, dim)).astype(np.float32)
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    texts = images + 0.05 * rng.normal(size=(n, dim)).astype(np.float32)
    texts /= np.linalg.norm(texts, axis=1, keepdims=True)
    image_ids = [f"i{i}" for i in range(n)]
    text_ids = [f"t{i}" for i in range(n)]
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(
        pa.table(
            [image_ids, [_png((20 * i, 0, 0)) for i in range(n)], [None] * n], schema=IMAGES_SCHEMA
        ),
        data / "images.parquet",
    )
    captions = [f"caption number {i}" for i in range(n)]
    pq.write_table(
        pa.table([text_ids, captions, [None] * n], schema=TEXTS_SCHEMA), data / "texts.parquet"
    )
    pq.write_table(
        pa.table([image_ids, text_ids, [1] * n], schema=QRELS_SCHEMA), data / "qrels.parquet"
    )
    paths = {"data": data}
    for name, matrix, ids in (("image", images, image_ids), ("text", texts, text_ids)):
        save_matrix(MatrixFiles.at(tmp_path / name), ids, matrix, {})
        build_flat_index(tmp_path / f"{name}.npy", tmp_path / f"{name}.faiss")
        paths[name] = tmp_path / name
    return paths


def test_examples_come_from_the_index_with_the_correct_item_first(prepared) -> None:
    image, text = prepared["image"], prepared["text"]
    relevant = {f"i{i}": {f"t{i}"} for i in range(12)}
    examples = search_examples(
        f"{image}.npy",
        f"{image}.ids.parquet",
        f"{text}.faiss",
        f"{text}.ids.parquet",
        relevant,
        {},
        count=3,
    )
    assert [example.query_id for example in examples] == ["i0", "i6", "i11"]
    for example in examples:
        assert len(example.items) == 5
        assert example.items[0] in example.relevant
        assert example.scores == sorted(example.scores, reverse=True)


def test_example_figure_frames_the_correct_items(prepared, tmp_path: Path) -> None:
    image, text = prepared["image"], prepared["text"]
    shown = write_examples(
        f"{text}.npy",
        f"{text}.ids.parquet",
        f"{image}.faiss",
        f"{image}.ids.parquet",
        prepared["data"] / "qrels.parquet",
        None,
        prepared["data"],
        "text_to_image",
        2,
        "title",
        tmp_path / "examples.png",
    )
    assert shown == 2
    with Image.open(tmp_path / "examples.png") as png:
        assert png.format == "PNG"
    examples = search_examples(
        f"{text}.npy",
        f"{text}.ids.parquet",
        f"{image}.faiss",
        f"{image}.ids.parquet",
        {f"t{i}": {f"i{i}"} for i in range(12)},
        {},
        count=2,
    )
    figure = render_examples(examples, "text_to_image", prepared["data"], "title")
    ticked = [axis for axis in figure.axes if "✓" in axis.get_title()]
    assert len(ticked) == sum(
        item in example.relevant for example in examples for item in example.items
    )
    assert all(max(s.get_linewidth() for s in axis.spines.values()) == 4 for axis in ticked)


def test_thumbnails_of_large_jpegs_come_from_a_reduced_decode() -> None:
    """A draft (DCT-scaled) decode: the same thumbnail size, close to a full decode's pixels."""
    from PIL import Image

    from vlbench.report.qualitative import THUMBNAIL_PIXELS, _thumbnail

    y, x = np.mgrid[0:1300, 0:1600]
    photo = np.stack([x % 256, y % 256, (x + y) % 256], axis=-1).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(photo).save(buffer, "JPEG", quality=92)
    thumbnail = _thumbnail(buffer.getvalue())
    with Image.open(io.BytesIO(buffer.getvalue())) as image:
        assert image.draft("RGB", (THUMBNAIL_PIXELS, THUMBNAIL_PIXELS)) is not None
        full = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
    full.thumbnail((THUMBNAIL_PIXELS, THUMBNAIL_PIXELS))
    assert thumbnail.shape == np.asarray(full).shape == (130, 160, 3)
    assert np.abs(thumbnail.astype(int) - np.asarray(full).astype(int)).mean() < 8
