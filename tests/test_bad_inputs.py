"""The bad-input matrix: each row gets a one-line error naming the file, row or key, a recorded
skip where the policy says skip, or the reference behaviour, never a bare traceback.

Rows tested in other files are listed in MATRIX_ELSEWHERE; `test_matrix_is_complete` keeps
that list honest.
"""

from __future__ import annotations

import ast
import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from fixtures_sources import prepare_paired_files
from PIL import Image
from workflow_helpers import REPO, TINY_MODEL_CONFIG

from vlbench.data.canonical import IMAGES_SCHEMA, read_table
from vlbench.embedding.loader import decode_image
from vlbench.embedding.models import load_model, normalise, write_random_checkpoint
from vlbench.errors import VlbenchError

SOURCE = Path("bench/images.parquet")

MATRIX_ELSEWHERE = {
    "duplicate ids": "test_sources_validation.py::test_duplicate_image_ids_fail",
    "duplicate text ids": "test_sources_validation.py::test_duplicate_text_ids_fail",
    "judgements pointing at missing ids": (
        "test_sources_validation.py::test_judgement_naming_an_unknown_item_fails"
    ),
    "candidates pointing at missing ids": (
        "test_sources_validation.py::test_candidate_naming_an_unknown_item_fails"
    ),
    "undecodable image skipped and recorded": (
        "test_prepare_sources.py::test_undecodable_images_fail_by_default_and_are_recorded_when_skipped"
    ),
    "config key typo": "test_config.py::test_typo_in_model_key_names_key_and_allowed_ones",
    "config key typo via snakemake": "test_workflow_e2e.py::test_typo_in_config_is_one_clear_line",
    "config key given twice via snakemake": (
        "test_workflow_e2e.py::test_a_model_key_given_twice_is_one_clear_line"
    ),
    "missing local path": (
        "test_workflow_e2e.py::test_missing_local_source_fails_naming_key_and_path"
    ),
    "unreadable parquet": (
        "test_sources_validation.py::test_a_corrupt_parquet_shard_is_a_one_line_error"
    ),
    "hub revision that does not exist": (
        "test_sources_download.py::test_missing_revision_is_one_line_with_no_retry"
    ),
    "path traversal through a key": "test_config.py::test_keys_used_in_paths_are_constrained",
    "annotation id leaving the image folder": (
        "test_sources_contained.py::test_an_annotation_id_leaving_the_image_folder_is_refused"
    ),
    "zero-shot filepath outside the folder or absolute": (
        "test_sources_contained.py::test_a_zero_shot_filepath_outside_the_folder_is_refused"
    ),
    "link pointing out of a local folder": (
        "test_sources_contained.py::test_a_link_pointing_out_of_a_local_folder_is_refused"
    ),
    "zip member outside the archive": (
        "test_sources_contained.py::test_a_zip_member_outside_the_archive_is_refused"
    ),
    "tar member outside the archive": (
        "test_sources_contained.py::test_a_tar_member_outside_the_archive_is_refused"
    ),
    "nested --config value": (
        "test_run_config.py::test_nested_values_from_snakemakes_command_line_take_the_schemas_types"
    ),
    "bad --config value names --config": (
        "test_run_config.py::test_a_bad_command_line_value_names_config_not_the_file"
    ),
    "--config through snakemake": (
        "test_run_config.py::test_config_overrides_work_through_snakemake"
    ),
    "outputs of an earlier config": (
        "test_workflow_e2e.py::test_switching_configs_leaves_only_the_current_configs_tables"
    ),
    "shipped demo config outside the checkout": (
        "test_run_config.py::test_the_shipped_demo_names_its_model_file_from_any_working_directory"
    ),
    "shipped configs with --directory anywhere": (
        "test_planning_imports.py::test_a_dry_run_imports_no_model_library"
    ),
    "model file missing: refused at plan time": (
        "test_workflow_e2e.py::test_a_missing_model_file_is_refused_at_plan_time_not_in_a_job"
    ),
    "open_clip tag of another architecture": (
        "test_run_config.py::test_an_open_clip_tag_of_another_architecture_is_refused_at_plan_time"
    ),
    "left out for missing data: not_run.csv and the run's last line": (
        "test_workflow_e2e.py::test_switching_configs_leaves_only_the_current_configs_tables"
    ),
    "units per metric in the tables": (
        "test_benchmark_table_units.py::test_each_column_names_its_unit"
    ),
    "partials of a killed writer, every stage": (
        "test_stage_partials.py::test_a_stage_killed_before_its_rename_is_swept_by_its_next_run"
    ),
    "full disk in a library's own error": (
        "test_atomic.py::test_a_library_error_for_a_full_disk_is_one_line"
    ),
    "full disk outside an atomic writer": (
        "test_atomic.py::test_a_full_disk_outside_an_atomic_writer_is_one_line_in_a_rule_log"
    ),
    "vlbench score: NaN or zero row": (
        "test_score_cli.py::test_a_nan_or_zero_row_names_the_file_row_and_id"
    ),
    "vlbench score: a file that is no .npy matrix": (
        "test_score_cli.py::test_a_file_that_is_no_npy_matrix_says_so"
    ),
    "vlbench score: negative relevance": (
        "test_score_cli.py::test_a_negative_or_fractional_relevance_is_refused"
    ),
    "YAML error in a config file the workflow reads": (
        "test_run_config.py::test_a_yaml_error_in_a_config_file_names_its_line"
    ),
}


def encoded(image: Image.Image, fmt: str, **save: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **save)
    return buffer.getvalue()


def gradient(size: tuple[int, int] = (48, 32)) -> Image.Image:
    x = np.linspace(0, 255, size[0], dtype=np.uint8)
    y = np.linspace(255, 0, size[1], dtype=np.uint8)
    red, green = np.meshgrid(x, y)
    return Image.fromarray(np.stack([red, green, np.full_like(red, 90)], -1))


def reference_rgb(data: bytes) -> np.ndarray:
    """What the reference scripts see: the `datasets` Image feature, then .convert('RGB')."""
    import datasets

    decoded = datasets.Image().decode_example({"bytes": data, "path": None})
    return np.asarray(decoded.convert("RGB"))


# --- image bytes -----------------------------------------------------------------------------


def test_truncated_image_names_the_image() -> None:
    data = encoded(gradient(), "JPEG")
    with pytest.raises(VlbenchError, match=r"image 'img-7' cannot be decoded") as info:
        decode_image(data[: len(data) // 2], "img-7", SOURCE)
    assert str(SOURCE) in str(info.value) and "\n" not in str(info.value)


def test_zero_byte_image_names_the_image() -> None:
    with pytest.raises(VlbenchError, match="image 'empty' cannot be decoded"):
        decode_image(b"", "empty", SOURCE)


def test_non_image_bytes_name_the_image() -> None:
    with pytest.raises(VlbenchError, match="image 'text' cannot be decoded"):
        decode_image(b"<html>not an image</html>", "text", SOURCE)


@pytest.mark.parametrize(
    ("mode", "fmt"),
    [("CMYK", "JPEG"), ("L", "PNG"), ("L", "JPEG"), ("I;16", "PNG"), ("RGBA", "PNG")],
)
def test_unusual_modes_decode_as_the_reference_does(mode: str, fmt: str) -> None:
    image = gradient()
    if mode == "I;16":
        image = Image.fromarray((np.asarray(image.convert("L"), np.uint16) * 200).astype(np.uint16))
    else:
        image = image.convert(mode)
    data = encoded(image, fmt)
    decoded = decode_image(data, "x", SOURCE)
    assert decoded.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(decoded), reference_rgb(data))


def test_palette_with_transparency_decodes_as_the_reference_does() -> None:
    image = gradient().quantize(colors=8)
    data = encoded(image, "PNG", transparency=0)
    assert Image.open(io.BytesIO(data)).info.get("transparency") == 0
    np.testing.assert_array_equal(np.asarray(decode_image(data, "p", SOURCE)), reference_rgb(data))


def test_exif_rotated_image_is_turned_upright_like_the_datasets_loader() -> None:
    image = gradient((48, 32))
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 degrees clockwise to display
    data = encoded(image, "JPEG", exif=exif)
    decoded = decode_image(data, "rot", SOURCE)
    assert decoded.size == (32, 48)
    np.testing.assert_array_equal(np.asarray(decoded), reference_rgb(data))


def bomb_png(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims an enormous picture."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64))


def test_decompression_bomb_is_refused_by_id() -> None:
    with pytest.raises(VlbenchError, match=r"(?i)image 'bomb' cannot be decoded.*bomb"):
        decode_image(bomb_png(40_000, 40_000), "bomb", SOURCE)


# --- through a model -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    checkpoint = tmp_path_factory.mktemp("tiny") / "tiny.pt"
    write_random_checkpoint("vlbench-tiny", TINY_MODEL_CONFIG, 0, checkpoint)
    spec = {
        "name": "vlbench-tiny",
        "model_config": str(TINY_MODEL_CONFIG),
        "pretrained": str(checkpoint),
    }
    return load_model(spec)


def test_one_pixel_image_embeds(tiny) -> None:
    data = encoded(Image.new("RGB", (1, 1), (200, 10, 10)), "PNG")
    pixels = tiny.preprocess(decode_image(data, "dot", SOURCE)).unsqueeze(0)
    vector = tiny.encode_images(pixels)
    assert vector.shape == (1, 64)
    assert np.isfinite(vector).all() and np.linalg.norm(vector) == pytest.approx(1.0, rel=1e-5)


def test_longer_than_context_caption_is_truncated_and_counted(tiny) -> None:
    long_caption = " ".join(["hepatocyte"] * 500)
    tokens = tiny.tokenize([long_caption, "a short caption"])
    vectors = tiny.encode_tokens(tokens)
    assert vectors.shape == (2, 64) and np.isfinite(vectors).all()
    assert tiny.filling_context(tokens).tolist() == [True, False]


def test_non_ascii_caption_embeds_distinctly(tiny) -> None:
    vectors = tiny.encode_texts(["Zellkern mit Färbung – 40× μm", "Zellkern mit Farbung - 40x um"])
    assert np.isfinite(vectors).all()
    assert not np.allclose(vectors[0], vectors[1])


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nan_or_infinite_embeddings_are_refused(bad: float) -> None:
    with pytest.raises(VlbenchError, match="NaN or infinite"):
        normalise(torch.tensor([[0.5, 0.5], [bad, 1.0]]))


@pytest.mark.parametrize(
    ("name", "pretrained"), [("ViT-Nonexistent-99", None), ("ViT-B-32", "no_such_tag_2020")]
)
def test_unknown_model_name_or_tag_is_one_line(name: str, pretrained: str | None) -> None:
    spec = {"name": name} | ({"pretrained": pretrained} if pretrained else {})
    with pytest.raises(VlbenchError) as info:
        load_model(spec)
    assert "\n" not in str(info.value)
    assert (pretrained or name) in str(info.value)


def test_a_checkpoint_that_does_not_fit_names_the_keys_and_shapes(tmp_path: Path) -> None:
    checkpoint = tmp_path / "tiny.pt"
    write_random_checkpoint("vlbench-tiny", TINY_MODEL_CONFIG, 0, checkpoint)
    state = torch.load(checkpoint, weights_only=True)
    dropped, reshaped = "logit_scale", "text_projection"
    del state[dropped]
    state["visual.extra_head.weight"] = torch.zeros(2, 2)
    state[reshaped] = torch.zeros(3, 5)
    torch.save(state, checkpoint)
    spec = {"name": "vlbench-tiny", "model_config": str(TINY_MODEL_CONFIG)}
    with pytest.raises(VlbenchError) as info:
        load_model(spec | {"pretrained": str(checkpoint)})
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"model vlbench-tiny: {checkpoint} does not fit the architecture (")
    assert f"1 missing key(s): {dropped}" in message
    assert "1 unexpected key(s): visual.extra_head.weight" in message
    assert f"1 shape mismatch(es): {reshaped} is [3, 5] in the checkpoint, [" in message


@pytest.mark.parametrize("content", [b"hello, this is text\n", b"<html>404</html>", b""])
def test_a_file_that_is_no_checkpoint_says_so(tmp_path: Path, content: bytes) -> None:
    checkpoint = tmp_path / "weights.pt"
    checkpoint.write_bytes(content)
    spec = {"name": "vlbench-tiny", "model_config": str(TINY_MODEL_CONFIG)}
    with pytest.raises(VlbenchError) as info:
        load_model(spec | {"pretrained": str(checkpoint)})
    message = str(info.value)
    expected = "the checkpoint file is empty" if not content else "not a PyTorch checkpoint"
    assert message.startswith(f"{checkpoint}: {expected}"), message
    assert "(101)" not in message and "\n" not in message


@pytest.mark.parametrize("modality", ["image", "text"])
def test_nan_embeddings_name_the_model_file_and_item(
    tiny, modality: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from embed_support import embed_rows, write_images, write_texts

    from vlbench.embedding.settings import EmbedSettings
    from vlbench.embedding.shard_files import Shard

    source = tmp_path / f"{modality}s.parquet"
    (write_images if modality == "image" else write_texts)(source, 6, 3)
    encode = "encode_image" if modality == "image" else "encode_text"
    original = getattr(tiny.model, encode)
    batches = []

    def nan_in_the_second_batch(inputs: torch.Tensor) -> torch.Tensor:
        features = original(inputs)
        batches.append(len(features))
        if len(batches) == 2:  # rows 4 and 5 of the file: make row 5 NaN
            features[1] = float("nan")
        return features

    monkeypatch.setattr(tiny.model, encode, nan_in_the_second_batch)
    monkeypatch.setattr(tiny, "padding_trimmed_text_encoder", None)
    settings = EmbedSettings.from_config(batch_size=4, pixel_cache=False)
    with pytest.raises(VlbenchError) as info:
        embed_rows(tiny, Shard(modality, source, 0, 0, 6), settings)
    prefix = "img" if modality == "image" else "txt"
    assert str(info.value) == (
        f"model vlbench-tiny: {source}: {modality} '{prefix}-0005' (row 5): "
        "the model produced NaN or infinite embeddings"
    )


def test_a_full_disk_in_the_metrics_step_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import polars as pl

    from vlbench.metrics.job import write_metrics
    from vlbench.protocols import PROTOCOLS
    from vlbench.rank.protocol_ranks import Side, rank_protocol

    ids = np.array(["a", "b"], dtype=object)
    side = Side(np.eye(2, dtype=np.float32), ids, None, name="x")
    judged = pl.DataFrame({"query_id": ["a", "b"], "item_id": ["a", "b"], "relevance": [1, 1]})
    ranks = tmp_path / "ranks.parquet"
    rank_protocol(PROTOCOLS["paired"], side, side, judged, None).write_parquet(ranks)

    def full(self: pl.DataFrame, path: object, *args: object, **kwargs: object) -> None:
        raise pl.exceptions.ComputeError(
            "parquet: File out of specification: underlying IO error: No space left on device "
            "(os error 28)"
        )

    monkeypatch.setattr(pl.DataFrame, "write_parquet", full)
    outcomes = tmp_path / "metrics" / "i2t.outcomes.parquet"
    labels = {"benchmark": "b", "subset": "test", "model": "m", "direction": "image_to_text"}
    with pytest.raises(VlbenchError) as info:
        write_metrics(ranks, PROTOCOLS["paired"], [1], labels, "index", {"bootstrap_samples": 0},
                      tmp_path / "metrics" / "i2t.csv", outcomes)  # fmt: skip
    assert str(info.value) == f"no space left on device for {outcomes} (needs more than 0.1 MB)"
    assert not outcomes.exists() and not list(outcomes.parent.glob(".*.partial"))


# --- captions and tables ---------------------------------------------------------------------


def paired_source(tmp_path: Path, captions: list[str | None]) -> list[Path]:
    path = tmp_path / "data" / "test-00000-of-00001.parquet"
    path.parent.mkdir(parents=True)
    image = {"bytes": encoded(gradient(), "PNG"), "path": "a.png"}
    schema = pa.schema(
        [
            ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
            ("caption", pa.string()),
        ]
    )
    columns = {"image": [image] * len(captions), "caption": captions}
    pq.write_table(pa.table(columns, schema=schema), path)
    return [path]


@pytest.mark.parametrize("caption", ["", "   \t\n"])
def test_empty_or_whitespace_caption_names_the_row(tmp_path: Path, caption: str) -> None:
    files = paired_source(tmp_path, ["fine", "also fine", caption])
    with pytest.raises(VlbenchError, match="row 2: the caption is empty"):
        prepare_paired_files(files, tmp_path / "out", {})


def replace_column(path: Path, column: str, values: list) -> None:
    """Rewrite one column of a source parquet with other values (and so another type)."""
    table = pq.read_table(path)
    index = table.schema.get_field_index(column)
    pq.write_table(table.set_column(index, column, pa.array(values)), path)


@pytest.mark.parametrize("kind", ["biomedflickr", "biomedflickr-float", "inquire", "biovita"])
def test_numeric_text_column_names_the_file_column_and_row(tmp_path: Path, kind: str) -> None:
    """A caption / query / corpus text column holding numbers, loaded by the source loader."""
    from fixtures_sources import write_biovita_repo, write_inquire_repo

    from vlbench.data.sources import biovita, hf_parquet, inquire

    root = tmp_path / "repo"
    source: dict = {"split": "test"}
    if kind.startswith("biomedflickr"):
        loader, column, relative = hf_parquet.load, "caption", "data/test-00000-of-00001.parquet"
        paired_source(root, ["first", "second", "third"])
    elif kind == "inquire":
        loader, column, relative = inquire.load, "query", "data/test-00000-of-00001.parquet"
        write_inquire_repo(root, n_queries=2, per_query=3)
    else:
        loader, column = biovita.load, "text"
        relative = "unseen_species-corpus/test-00000-of-00001.parquet"
        write_biovita_repo(root, n_queries=3)
        source["subset"] = "unseen_species"
    path = root / relative
    rows = pq.read_metadata(path).num_rows
    numbers = [2.5 + i for i in range(rows)] if kind.endswith("float") else list(range(rows))
    replace_column(path, column, numbers)
    with pytest.raises(VlbenchError) as info:
        loader(root, source, {}, "benchmarks.x.source")
    message = str(info.value)
    assert message.startswith(f"{path}: row 0: column '{column}'"), message
    assert "\n" not in message


def test_empty_benchmark_is_an_error(tmp_path: Path) -> None:
    files = paired_source(tmp_path, [])
    with pytest.raises(VlbenchError, match="the benchmark has no images"):
        prepare_paired_files(files, tmp_path / "out", {})
    assert not (tmp_path / "out" / "images.parquet").exists()


def test_unreadable_canonical_parquet_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "images.parquet"
    path.write_bytes(b"PAR1 this is not really parquet")
    with pytest.raises(VlbenchError, match=r"images\.parquet: not a readable parquet file"):
        read_table(path, IMAGES_SCHEMA)


def test_matrix_is_complete() -> None:
    """Every row tested elsewhere names a test that exists."""
    for row, reference in MATRIX_ELSEWHERE.items():
        file_name, test_name = reference.split("::")
        [path] = (REPO / "tests").rglob(file_name)
        tree = ast.parse(path.read_text())
        names = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        assert test_name in names, f"matrix row {row!r}: {reference} is missing"
