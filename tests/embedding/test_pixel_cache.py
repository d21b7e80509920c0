"""The pixel cache: decode once per geometry, bitwise equal to the uncached reference path."""

from __future__ import annotations

import errno
import io
import os
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from embed_support import embed_rows, reference_image_embeddings, tiny_model, write_images
from PIL import Image
from small_disks import small_disk

from vlbench import atomic
from vlbench.atomic import sweep_partials
from vlbench.embedding.image_transform import ImagePipeline
from vlbench.embedding.loader import decode_chunk_rows, decode_image
from vlbench.embedding.pixel_cache import PixelCache, PixelShardWriter, source_fingerprint
from vlbench.embedding.settings import EmbedSettings
from vlbench.embedding.shard_files import Shard
from vlbench.errors import VlbenchError
from vlbench.hashing import sidecar

ROWS = 21


@pytest.fixture(scope="module")
def images_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bytes]]:
    path = tmp_path_factory.mktemp("pixels") / "images.parquet"
    return path, write_images(path, ROWS, row_group_size=5)


def rows(source: Path, start: int, stop: int, cache_dir: Path | None = None) -> Shard:
    """Rows [start, stop) of an images file as a shard (digest-less: the legacy cache name),
    its pixels cached in benchmark "bench"'s folder under `cache_dir`."""
    folder = cache_dir / "bench" if cache_dir is not None else None
    return Shard("image", source, 0, start, stop, pixel_folder=folder)


def settings(**changes) -> EmbedSettings:
    return EmbedSettings.from_config(**{"batch_size": 4, **changes})


@pytest.mark.parametrize(
    ("size", "resize_mode", "interpolation"),
    [
        (64, "shortest", "bicubic"),
        ((48, 64), "shortest", "bilinear"),
        (64, "longest", "bicubic"),
        ((40, 56), "squash", "bilinear"),
    ],
)
def test_cached_pixels_equal_the_model_preprocess_bitwise(
    images_file: tuple[Path, list[bytes]], size, resize_mode: str, interpolation: str
) -> None:
    _, images = images_file
    model = tiny_model(size=size, resize_mode=resize_mode, interpolation=interpolation)
    pipeline = ImagePipeline.from_model(model)
    assert pipeline.cacheable, pipeline.reason
    for data in images:
        decoded = Image.open(io.BytesIO(data)).convert("RGB")
        expected = model.preprocess(decoded)
        pixels = torch.from_numpy(pipeline.to_pixels(decoded))[None]
        assert pixels.dtype == torch.uint8
        assert torch.equal(pipeline.to_model_input(pixels)[0], expected)


def test_a_reused_input_buffer_holds_exactly_a_fresh_conversion(
    images_file: tuple[Path, list[bytes]],
) -> None:
    _, images = images_file
    model = tiny_model()
    pipeline = ImagePipeline.from_model(model)
    batches = [
        torch.from_numpy(
            np.stack([pipeline.to_pixels(Image.open(io.BytesIO(data)).convert("RGB"))] * 2)
        )
        for data in images[:3]
    ]
    first = pipeline.to_model_input(batches[0])
    second = pipeline.to_model_input(batches[1], reuse=first)
    assert second.data_ptr() == first.data_ptr()  # written in place
    assert torch.equal(second, pipeline.to_model_input(batches[1]))
    expected = model.preprocess(Image.open(io.BytesIO(images[1])).convert("RGB"))
    assert torch.equal(second[1], expected)
    smaller = pipeline.to_model_input(batches[2][:1], reuse=second)
    assert smaller.data_ptr() != second.data_ptr() and smaller.shape[0] == 1
    assert torch.equal(smaller, pipeline.to_model_input(batches[2][:1]))


def test_embeddings_through_cache_equal_reference_bitwise(
    images_file: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    source, images = images_file
    model = tiny_model()
    reference = reference_image_embeddings(model, images, batch_size=4)
    off = embed_rows(model, rows(source, 0, ROWS, tmp_path), settings(pixel_cache=False))[1]
    _, cold, stats_cold = embed_rows(model, rows(source, 0, ROWS, tmp_path), settings())
    ids, warm, stats_warm = embed_rows(model, rows(source, 0, ROWS, tmp_path), settings())
    assert stats_cold["pixel_cache"].startswith("miss")
    assert stats_warm["pixel_cache"].startswith("hit")
    assert ids == [f"img-{row:04d}" for row in range(ROWS)]
    for matrix in (off, cold, warm):
        assert matrix.dtype == np.float32
        assert np.array_equal(matrix, reference)


@pytest.mark.parametrize("workers", [2, 3])
def test_worker_processes_keep_row_order(
    images_file: tuple[Path, list[bytes]], tmp_path: Path, workers: int
) -> None:
    """Each batch of 4 is split across the workers (chunks of 2 rows, or 2 and 1 around a
    row-group edge); with the pixel cache off, cold and warm, the reference's rows and bits."""
    assert decode_chunk_rows(4, workers) == 2
    source, images = images_file
    model = tiny_model()
    reference = reference_image_embeddings(model, images[5:19], batch_size=4)
    for cache, state in ((False, "off"), (True, "miss"), (True, "hit")):
        run = settings(num_workers=workers, pixel_cache=cache)
        ids, matrix, stats = embed_rows(model, rows(source, 5, 19, tmp_path), run)
        assert stats["pixel_cache"].startswith(state)
        assert ids == [f"img-{row:04d}" for row in range(5, 19)]
        assert np.array_equal(matrix, reference)


def test_a_batch_is_split_across_the_decode_workers() -> None:
    assert [decode_chunk_rows(256, workers) for workers in (0, 1, 2, 14, 256, 300)] == [
        256, 256, 128, 19, 1, 1,
    ]  # fmt: skip


def test_models_sharing_a_geometry_share_the_cache_and_keep_their_own_normalisation(
    images_file: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    source, images = images_file
    first = tiny_model(seed=0)
    second = tiny_model(seed=1, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    key_first = ImagePipeline.from_model(first).geometry_key(draft=False)
    assert key_first == ImagePipeline.from_model(second).geometry_key(draft=False)
    embed_rows(first, rows(source, 0, ROWS, tmp_path), settings())
    _, matrix, stats = embed_rows(second, rows(source, 0, ROWS, tmp_path), settings())
    assert stats["pixel_cache"].startswith("hit")
    assert np.array_equal(matrix, reference_image_embeddings(second, images, batch_size=4))
    cache = PixelCache(tmp_path / "bench", key_first, source)
    assert sorted(p.name for p in cache.directory.glob("*.npy")) == [f"rows-{0:09d}-{ROWS:09d}.npy"]


def test_a_job_needing_a_shard_another_job_is_decoding_waits_and_reads_it(
    images_file: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    """Two models' jobs start together: the second decodes nothing, it waits for the first."""
    source, images = images_file
    model = tiny_model()
    key = ImagePipeline.from_model(model).geometry_key(draft=False)
    cache = PixelCache(tmp_path / "shared" / "bench", key, source)
    filled = tmp_path / "filled"
    embed_rows(model, rows(source, 0, ROWS, filled), settings())  # the first job's result
    made = PixelCache(filled / "bench", key, source).shard_path(0, ROWS)
    result: list = []
    second = threading.Thread(
        target=lambda: result.append(
            embed_rows(model, rows(source, 0, ROWS, tmp_path / "shared"), settings())
        )
    )
    with cache.filling(0, ROWS):  # the first job holds the shard while it decodes
        second.start()
        second.join(timeout=1.0)
        assert second.is_alive() and result == []  # waiting, not decoding
        shutil.copyfile(sidecar(made), sidecar(cache.shard_path(0, ROWS)))  # its digest first
        shutil.copyfile(made, cache.shard_path(0, ROWS))
    second.join(timeout=60)
    assert result[0].stats["pixel_cache"].startswith("hit after waiting")
    reference = reference_image_embeddings(model, images, batch_size=4)
    assert np.array_equal(result[0][1], reference)


def test_geometry_key_separates_what_changes_pixels() -> None:
    base = ImagePipeline.from_model(tiny_model()).geometry_key(draft=False)
    others = [
        ImagePipeline.from_model(tiny_model(size=72)).geometry_key(draft=False),
        ImagePipeline.from_model(tiny_model(interpolation="bilinear")).geometry_key(draft=False),
        ImagePipeline.from_model(tiny_model(resize_mode="longest")).geometry_key(draft=False),
        ImagePipeline.from_model(tiny_model(resize_mode="squash")).geometry_key(draft=False),
        ImagePipeline.from_model(tiny_model()).geometry_key(draft=True),
    ]
    assert len({base, *others}) == 6


def test_unknown_preprocess_falls_back_to_the_full_transform(
    images_file: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    source, images = images_file
    model = tiny_model()
    steps = model.preprocess.transforms
    model.preprocess.transforms = [*steps[:1], lambda image: image.rotate(90), *steps[1:]]
    pipeline = ImagePipeline.from_model(model)
    assert not pipeline.cacheable
    _, matrix, stats = embed_rows(model, rows(source, 0, ROWS, tmp_path), settings())
    assert stats["pixel_cache"].startswith("off: unknown preprocess step")
    assert np.array_equal(matrix, reference_image_embeddings(model, images, batch_size=4))
    assert not list(tmp_path.rglob("*.npy"))


def test_a_failed_pass_leaves_no_cache_shard(
    images_file: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    source, _ = images_file
    model = tiny_model()
    calls = {"n": 0}
    encode = model.encode_images

    def failing(pixels: torch.Tensor) -> np.ndarray:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return encode(pixels)

    model.encode_images = failing  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        embed_rows(model, rows(source, 0, ROWS, tmp_path), settings())
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_changed_source_file_gets_a_new_cache_directory(tmp_path: Path) -> None:
    first, second = tmp_path / "a.parquet", tmp_path / "b.parquet"
    write_images(first, 6, row_group_size=3, seed=0)
    write_images(second, 6, row_group_size=3, seed=1)
    assert source_fingerprint(first) != source_fingerprint(second)
    assert source_fingerprint(first) == source_fingerprint(first)


def test_draft_decode_is_smaller_and_close(images_file: tuple[Path, list[bytes]]) -> None:
    _, images = images_file
    large = images[3]
    full = decode_image(large, "img-0003", Path("x"))
    draft = decode_image(large, "img-0003", Path("x"), draft_size=(64, 64))
    assert full.size == (480, 390)
    assert draft.size == (120, 98)
    model = tiny_model()
    pipeline = ImagePipeline.from_model(model)
    difference = np.abs(
        pipeline.to_pixels(full).astype(int) - pipeline.to_pixels(draft).astype(int)
    )
    assert 0 < difference.mean() < 8


def cache_of(source: Path, cache_dir: Path) -> PixelCache:
    key = ImagePipeline.from_model(tiny_model()).geometry_key(draft=False)
    return PixelCache(cache_dir / "bench", key, source)


def partials(root: Path) -> list[Path]:
    return sorted(root.rglob("*.partial"))


@pytest.mark.parametrize("mask", [0o022, 0o027], ids=["umask022", "umask027"])
def test_cache_shards_get_the_umask_modes(
    mask: int, images_file: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    source, _ = images_file
    old = os.umask(mask)
    try:
        embed_rows(tiny_model(), rows(source, 0, ROWS, tmp_path), settings())
    finally:
        os.umask(old)
    cache = cache_of(source, tmp_path)
    for path in (cache.shard_path(0, ROWS), cache.directory / "geometry.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask


def test_full_disk_while_caching_is_one_line_and_leaves_no_partial(
    images_file: tuple[Path, list[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, _ = images_file

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "posix_fallocate", full)
    assert_full_disk_is_one_line(source, tmp_path)


def assert_full_disk_is_one_line(source: Path, root: Path) -> None:
    """Caching the images of `source` under `root` stops with the one-line full-disk error."""
    with pytest.raises(VlbenchError) as caught:
        embed_rows(tiny_model(), rows(source, 0, ROWS, root), settings())
    # 21 rows of 64x64x3 bytes and a 128-byte header: 258,176 bytes.
    shard = cache_of(source, root).shard_path(0, ROWS)
    assert str(caught.value) == f"no space left on device for {shard} (needs about 0.3 MB)"
    assert partials(root) == []
    assert not shard.exists()


def test_stale_partial_of_a_killed_build_is_removed_by_the_next_build(
    images_file: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    source, _ = images_file
    cache = cache_of(source, tmp_path)
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, signal, sys, numpy as np\n"
            "from vlbench.embedding.pixel_cache import PixelCache, PixelShardWriter\n"
            "cache = PixelCache(*sys.argv[1:])\n"
            f"writer = PixelShardWriter(cache, 0, {ROWS})\n"
            "writer.append(np.zeros((4, 64, 64, 3), np.uint8))\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n",
            str(tmp_path / "bench"),
            ImagePipeline.from_model(tiny_model()).geometry_key(draft=False),
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -9, killed.stderr
    [stale] = partials(tmp_path)
    assert stale.name.startswith(f".{cache.shard_path(0, ROWS).name}.")
    stats = embed_rows(tiny_model(), rows(source, 0, ROWS, tmp_path), settings()).stats
    assert stats["pixel_cache"].startswith("miss")
    assert partials(tmp_path) == []
    assert cache.load(0, ROWS) is not None


def test_partial_of_a_live_writer_is_kept(
    images_file: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    source, _ = images_file
    cache = cache_of(source, tmp_path)
    batch = np.zeros((4, 64, 64, 3), np.uint8)
    live = PixelShardWriter(cache, 0, ROWS)
    live.append(batch)
    [held] = partials(tmp_path)
    assert sweep_partials(cache.shard_path(0, ROWS)) == []
    other = PixelShardWriter(cache, 0, ROWS)
    other.append(batch)
    assert other.close(success=False) is False
    assert partials(tmp_path) == [held]
    assert live.close(success=False) is False
    assert partials(tmp_path) == []


@pytest.fixture
def small_disk_here(tmp_path: Path) -> Iterator[Path]:
    """A 128 KiB tmpfs: too small for the 258 KB cache shard of ROWS images."""
    with small_disk(tmp_path / "disk", "128k") as mount:
        yield mount


@pytest.mark.parametrize("fallocate", ["posix_fallocate", "zero fill"])
def test_full_real_disk_while_caching_is_one_line(
    fallocate: str,
    images_file: tuple[Path, list[bytes]],
    small_disk_here: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source, _ = images_file
    if fallocate == "zero fill":

        def unsupported(fd: int, offset: int, length: int) -> None:
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

        monkeypatch.setattr(atomic.os, "posix_fallocate", unsupported)
    assert_full_disk_is_one_line(source, small_disk_here)


def test_a_disk_with_no_block_left_is_one_line(
    images_file: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    """Not even the array's header fits: closing the partial's buffer fails too, quietly."""
    source, _ = images_file
    with small_disk(tmp_path / "disk", "64k", full=True) as full:
        assert_full_disk_is_one_line(source, full)
