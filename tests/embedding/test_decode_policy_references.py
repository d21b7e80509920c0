"""Each source format's decode policy against its reference's own loading code, bitwise.

The same encoded fixtures (RGB, L, RGBA, CMYK and palette images, and JPEG and PNG files whose
EXIF Orientation is 6) go through the reference's path (clip_benchmark's webdataset pipeline,
the `datasets` Image feature, or the PIL calls of the BioCLIP/BioCAP/INQUIRE scripts, each
followed by the open_clip preprocess) and through ours (an images parquet carrying the format's
policy, read by `ImageChunks`, then the cached-pixel tensor step): the tensors are bitwise equal.
"""

from __future__ import annotations

import importlib
import io
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import open_clip
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

from vlbench.data.canonical import IMAGES_SCHEMA
from vlbench.data.decode_policy import (
    CONVERT_CHOICES,
    LEGACY,
    DecodePolicy,
    policy_metadata,
    read_policy,
)
from vlbench.data.sources import FORMATS, format_policy
from vlbench.embedding.image_transform import ImagePipeline
from vlbench.embedding.loader import ImageChunks, decode_image, plan_chunks
from vlbench.errors import VlbenchError

ORIENTATION = 0x0112
SIZE = 24  # model input side: small, and smaller than every fixture so resize and crop both act

Preprocess = Callable[[Image.Image], torch.Tensor]


def _photo(seed: int, width: int, height: int) -> np.ndarray:
    """A photo-like RGB array: smooth gradients, a bright blob and sensor noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([x / width * 255, y / height * 255, (x + y) / (width + height) * 255], -1)
    blob = np.exp(-(((x - width * 0.6) ** 2 + (y - height * 0.3) ** 2) / (0.05 * width * height)))
    pixels = base * 0.7 + blob[..., None] * 90 + rng.normal(0, 12, base.shape)
    return np.clip(pixels, 0, 255).astype(np.uint8)


def _encoded(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def _rotated_exif() -> Image.Exif:
    exif = Image.Exif()
    exif[ORIENTATION] = 6  # stored sideways: rotate 90 degrees clockwise to display
    return exif


def make_fixtures() -> dict[str, tuple[str, bytes]]:
    """name -> (file suffix, encoded bytes): landscape and portrait sizes, every mode."""
    rgb = Image.fromarray(_photo(1, 61, 43))
    alpha = np.linspace(0, 255, 47 * 38, dtype=np.uint8).reshape(38, 47)
    rgba = Image.fromarray(np.dstack([_photo(2, 47, 38), alpha]), "RGBA")
    palette = Image.fromarray(_photo(3, 53, 41)).quantize(colors=24)
    return {
        "rgb": ("jpg", _encoded(rgb, "JPEG", quality=90)),
        "l": ("jpg", _encoded(Image.fromarray(_photo(4, 39, 58)).convert("L"), "JPEG")),
        "rgba": ("png", _encoded(rgba, "PNG")),
        "cmyk": ("jpg", _encoded(Image.fromarray(_photo(5, 57, 44)).convert("CMYK"), "JPEG")),
        "p": ("png", _encoded(palette, "PNG", transparency=0)),
        "exif6-jpeg": (
            "jpg",
            _encoded(Image.fromarray(_photo(6, 64, 40)), "JPEG", exif=_rotated_exif()),
        ),
        "exif6-png": (
            "png",
            _encoded(Image.fromarray(_photo(7, 50, 36)), "PNG", exif=_rotated_exif()),
        ),
    }


FIXTURES = make_fixtures()


@pytest.fixture(scope="module")
def preprocess() -> Preprocess:
    """open_clip's own eval transform: resize, center crop, RGB conversion, tensor, normalise."""
    return open_clip.image_transform(SIZE, is_train=False)


def ours(tmp_path: Path, policy: DecodePolicy, preprocess: Preprocess) -> dict[str, torch.Tensor]:
    """Our path: an images parquet carrying `policy`, decoded by ImageChunks into cached
    pixels, then the per-model tensor step (as an embedding job does)."""
    source = tmp_path / "images.parquet"
    schema = IMAGES_SCHEMA.with_metadata(policy_metadata(policy))
    table = pa.table(
        {
            "image_id": list(FIXTURES),
            "image": [data for _, data in FIXTURES.values()],
            "group": [None] * len(FIXTURES),
        },
        schema=schema,
    )
    tmp_path.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, source, row_group_size=3)
    assert read_policy(source) == policy
    pipeline = ImagePipeline.from_preprocess(preprocess)
    assert pipeline.cacheable
    tensors: dict[str, torch.Tensor] = {}
    chunks = ImageChunks(source, plan_chunks(source, 0, len(FIXTURES), 4), pipeline)
    for index in range(len(chunks)):
        item = chunks[index]
        inputs = pipeline.to_model_input(item["pixels"])
        tensors.update(zip(item["ids"], inputs, strict=True))
    return tensors


def assert_bitwise(reference: dict[str, torch.Tensor], mine: dict[str, torch.Tensor]) -> None:
    assert list(reference) == list(FIXTURES)
    for name in FIXTURES:
        assert reference[name].dtype == mine[name].dtype == torch.float32, name
        assert torch.equal(reference[name], mine[name]), f"{name}: pixels differ from the reference"


def write_files(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, (suffix, data) in FIXTURES.items():
        paths[name] = folder / f"{name}.{suffix}"
        paths[name].write_bytes(data)
    return paths


# --- references -------------------------------------------------------------------------------


def clip_benchmark_wds(root: Path, preprocess: Preprocess) -> dict[str, torch.Tensor]:
    """clip_benchmark's `build_wds_dataset` over a one-shard retrieval webdataset."""
    builder = importlib.import_module("clip_benchmark.datasets.builder")
    importlib.import_module("webdataset")
    (root / "test").mkdir(parents=True)
    with tarfile.open(root / "test" / "0.tar", "w") as tar:
        for index, (suffix, data) in enumerate(FIXTURES.values()):
            for name, payload in ((f"s{index:04d}.{suffix}", data), (f"s{index:04d}.txt", b"a")):
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    (root / "test" / "nshards.txt").write_text("1", encoding="utf-8")
    (root / "dataset_type.txt").write_text("retrieval", encoding="utf-8")
    dataset = builder.build_wds_dataset("wds_fixture", preprocess, "test", str(root))
    tensors = [tensor for tensor, _ in dataset]
    return dict(zip(FIXTURES, tensors, strict=True))


def datasets_images() -> list[Image.Image]:
    """The fixtures as the `datasets` Image feature hands them out (hub parquet, mteb, INQUIRE)."""
    datasets = importlib.import_module("datasets")
    features = datasets.Features({"image": datasets.Image()})
    rows = [{"bytes": data, "path": None} for _, data in FIXTURES.values()]
    dataset = datasets.Dataset.from_dict({"image": rows}, features=features)
    return [dataset[index]["image"] for index in range(len(dataset))]


def datasets_then_rgb(preprocess: Preprocess) -> dict[str, torch.Tensor]:
    """BioMedFlickr card script (collate: `preprocess(ex["image"].convert("RGB"))`) and mteb's
    BioVITA model wrapper (`image_preprocess(image.convert("RGB"))`)."""
    return {
        n: preprocess(i.convert("RGB")) for n, i in zip(FIXTURES, datasets_images(), strict=True)
    }


def datasets_as_is(preprocess: Preprocess) -> dict[str, torch.Tensor]:
    """INQUIRE's eval_clip_rerank_hf.py (`preprocess(ex["image"])`) and DataComp's retrieval
    dataset over the nlphuji sets (`transform(self._dataset[index]["image"])`)."""
    return {n: preprocess(i) for n, i in zip(FIXTURES, datasets_images(), strict=True)}


def bioclip_img_loader(folder: Path, preprocess: Preprocess) -> dict[str, torch.Tensor]:
    """BioCLIP/BioCAP zero_shot_iid `DatasetFromFile`: `Image.open`, RGB only for RGBA and P."""
    tensors = {}
    for name, path in write_files(folder).items():
        image = Image.open(path)
        if image.mode in ("RGBA", "P"):
            image = image.convert("RGB")
        tensors[name] = preprocess(image)
    return tensors


def open_convert_rgb(folder: Path, preprocess: Preprocess) -> dict[str, torch.Tensor]:
    """BioCAP retrieval_openclip.py and the Karpathy-split loaders (ALBEF/BLIP `re_eval_dataset`):
    `Image.open(path).convert('RGB')`, then the transform."""
    return {
        name: preprocess(Image.open(path).convert("RGB"))
        for name, path in write_files(folder).items()
    }


# --- the tests --------------------------------------------------------------------------------


def test_clip_benchmark_wds_policy_matches_clip_benchmark(tmp_path: Path, preprocess) -> None:
    reference = clip_benchmark_wds(tmp_path / "wds", preprocess)
    assert_bitwise(reference, ours(tmp_path, FORMATS["clip_benchmark_wds"].decode, preprocess))


@pytest.mark.parametrize("fmt", ["hf_parquet", "biovita"])
def test_datasets_then_rgb_formats_match_their_reference(tmp_path: Path, preprocess, fmt) -> None:
    assert_bitwise(datasets_then_rgb(preprocess), ours(tmp_path, FORMATS[fmt].decode, preprocess))


@pytest.mark.parametrize("fmt", ["inquire", "nlphuji_csv_zip"])
def test_datasets_as_is_formats_match_their_reference(tmp_path: Path, preprocess, fmt) -> None:
    assert_bitwise(datasets_as_is(preprocess), ours(tmp_path, FORMATS[fmt].decode, preprocess))


def test_imagefolder_csv_policy_matches_the_bioclip_loader(tmp_path: Path, preprocess) -> None:
    reference = bioclip_img_loader(tmp_path / "files", preprocess)
    assert_bitwise(reference, ours(tmp_path, FORMATS["imagefolder_csv"].decode, preprocess))


@pytest.mark.parametrize("fmt", ["annotation_csv", "karpathy_json"])
def test_open_convert_formats_match_their_reference(tmp_path: Path, preprocess, fmt) -> None:
    reference = open_convert_rgb(tmp_path / "files", preprocess)
    assert_bitwise(reference, ours(tmp_path, FORMATS[fmt].decode, preprocess))


def test_the_fixtures_tell_the_policies_apart(preprocess) -> None:
    """The fixtures are sensitive: EXIF and mode order each change some tensor."""
    _, rotated = FIXTURES["exif6-jpeg"]
    upright = decode_image(rotated, "x", Path("f"), policy=LEGACY)
    sideways = decode_image(rotated, "x", Path("f"), policy=DecodePolicy(False, "before"))
    assert upright.size == sideways.size[::-1]
    pipeline = ImagePipeline.from_preprocess(preprocess)
    for name in ("p", "cmyk"):
        data = FIXTURES[name][1]
        first = pipeline.to_pixels(decode_image(data, name, Path("f"), policy=LEGACY))
        late = decode_image(data, name, Path("f"), policy=DecodePolicy(True, "after"))
        assert late.mode == name.upper()
        assert not np.array_equal(first, pipeline.to_pixels(late)), name


def test_legacy_decode_is_the_former_decode_bitwise() -> None:
    """Formats whose reference matches the former behaviour keep byte-identical pixels."""
    from PIL import ExifTags, ImageOps

    for name, (_, data) in FIXTURES.items():
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            if image.getexif().get(ExifTags.Base.Orientation) is not None:
                former = ImageOps.exif_transpose(image).convert("RGB")
            else:
                former = image.convert("RGB")
        now = decode_image(data, name, Path("f"))
        assert now.mode == "RGB"
        assert np.array_equal(np.asarray(former), np.asarray(now)), name


def test_config_overrides_the_format_default() -> None:
    assert format_policy("clip_benchmark_wds", None) == DecodePolicy(False, "before")
    assert format_policy("clip_benchmark_wds", {"exif": True}) == LEGACY
    assert format_policy("hf_parquet", {"convert": "after"}) == DecodePolicy(True, "after")
    with pytest.raises(VlbenchError, match=r"benchmarks.b.decode.convert must be one of"):
        format_policy("hf_parquet", {"convert": "late"}, "benchmarks.b")
    with pytest.raises(VlbenchError, match=r"benchmarks.b.decode: unknown key\(s\) rotate"):
        format_policy("hf_parquet", {"rotate": True}, "benchmarks.b")


def test_each_reference_is_matched_by_exactly_its_formats_policy(
    tmp_path: Path, preprocess
) -> None:
    """Of the six policies, only the format's own reproduces its reference: the fixtures tell
    every EXIF and mode-order choice apart."""
    references = {
        "clip_benchmark_wds": clip_benchmark_wds(tmp_path / "wds", preprocess),
        "hf_parquet": datasets_then_rgb(preprocess),
        "inquire": datasets_as_is(preprocess),
        "imagefolder_csv": bioclip_img_loader(tmp_path / "a", preprocess),
        "annotation_csv": open_convert_rgb(tmp_path / "b", preprocess),
    }
    policies = [
        DecodePolicy(exif, convert) for exif in (True, False) for convert in CONVERT_CHOICES
    ]
    decoded = {p: ours(tmp_path / p.label, p, preprocess) for p in policies}
    for fmt, reference in references.items():
        matching = [
            policy
            for policy, mine in decoded.items()
            if all(torch.equal(reference[name], mine[name]) for name in FIXTURES)
        ]
        assert matching == [FORMATS[fmt].decode], fmt
