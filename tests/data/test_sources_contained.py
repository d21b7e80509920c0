"""Paths read from data files (ids, file paths, archive members) stay inside their folder or
archive: '..', absolute paths and links pointing out are one-line errors naming file, row, path."""

from __future__ import annotations

import csv
import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest
from fixtures_sources import (
    image_bytes,
    write_annotation_pairs,
    write_class_folder,
    write_karpathy,
    write_nlphuji_repo,
)

from vlbench.data.sources import classification, csv_pairs, flickr_coco
from vlbench.errors import VlbenchError

WHERE = "benchmarks.b.source"


def rewrite_csv_cell(path: Path, row: int, column: str, value: str) -> None:
    """Set one cell of a CSV (row 0 is the first data row)."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    rows[row][column] = value
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def outside_secret(tmp_path: Path) -> Path:
    secret = tmp_path / "secret.jpg"
    secret.write_bytes(image_bytes(99))
    return secret


def one_line(error: pytest.ExceptionInfo[VlbenchError]) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("item_id", ["../../secret", "../secret", "/etc/secret"])
def test_an_annotation_id_leaving_the_image_folder_is_refused(tmp_path: Path, item_id: str) -> None:
    root = tmp_path / "birds"
    write_annotation_pairs(root, n=4)
    rewrite_csv_cell(root / "annotations.csv", 2, "id", item_id)
    source = {"path": str(root), "images": "images", "verify_md5": False}
    with pytest.raises(VlbenchError) as error:
        csv_pairs.load(root, source, {}, WHERE)
    message = one_line(error)
    assert message.startswith(f"{root / 'annotations.csv'}: line 4: path '{item_id}.jpg'")
    assert ("absolute" if item_id.startswith("/") else "leaves") in message


@pytest.mark.parametrize("relative", ["../secret.jpg", "images/../../secret.jpg", "ABS"])
def test_a_zero_shot_filepath_outside_the_folder_is_refused(tmp_path: Path, relative: str) -> None:
    root = tmp_path / "nabirds"
    write_class_folder(root, ["a", "b"], per_class=2)
    secret = outside_secret(tmp_path)
    relative = str(secret) if relative == "ABS" else relative
    rewrite_csv_cell(root / "metadata.csv", 1, "filepath", relative)
    with pytest.raises(VlbenchError) as error:
        classification.load(root, {"path": str(root)}, {"templates": "none"}, WHERE)
    message = one_line(error)
    assert message.startswith(f"{root / 'metadata.csv'}: line 3: path '{relative}'"), message


def test_a_link_pointing_out_of_a_local_folder_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "nabirds"
    rows = write_class_folder(root, ["a", "b"], per_class=2)
    secret = outside_secret(tmp_path)
    linked = root / rows[1][0]
    linked.unlink()
    linked.symlink_to(secret)
    with pytest.raises(VlbenchError) as error:
        classification.load(root, {"path": str(root)}, {"templates": "none"}, WHERE)
    message = one_line(error)
    assert message == (
        f"{root / 'metadata.csv'}: line 3: path '{rows[1][0]}' is a link to {secret}, "
        f"outside {root}"
    )
    # A link inside the folder is fine; a hub snapshot's links (into the hub cache) are not
    # followed, only the path as written is checked.
    linked.unlink()
    linked.symlink_to(root / rows[0][0])
    assert (
        len(
            list(
                classification.load(root, {"path": str(root)}, {"templates": "none"}, WHERE).images
            )
        )
        == 4
    )
    linked.unlink()
    linked.symlink_to(secret)
    hub = {"repo": "org/nabirds", "revision": "a" * 40}
    assert len(list(classification.load(root, hub, {"templates": "none"}, WHERE).images)) == 4


def test_a_link_to_an_image_folder_outside_the_annotation_folder_is_allowed(
    tmp_path: Path,
) -> None:
    """The folder named in the config (`images`) may live elsewhere; its files may not leave it."""
    root, elsewhere = tmp_path / "birds", tmp_path / "disk" / "bird-images"
    write_annotation_pairs(elsewhere.parent / "tmp", n=3)
    (elsewhere.parent / "tmp" / "images").rename(elsewhere)
    root.mkdir()
    (elsewhere.parent / "tmp" / "annotations.csv").rename(root / "annotations.csv")
    (root / "images").symlink_to(elsewhere)
    source = {"path": str(root), "images": "images"}
    assert len(list(csv_pairs.load(root, source, {}, WHERE).images)) == 3


def test_a_karpathy_filepath_leaving_the_image_folder_is_refused(tmp_path: Path) -> None:
    document = write_karpathy(tmp_path / "coco", {"test": 3}, coco=True)
    document["images"][2]["filepath"] = "../../outside"
    annotations = tmp_path / "coco" / "dataset_coco.json"
    annotations.write_text(json.dumps(document), encoding="utf-8")
    source = {"path": str(tmp_path / "coco"), "annotations": annotations.name, "images": "images"}
    with pytest.raises(VlbenchError) as error:
        flickr_coco.load_karpathy(tmp_path / "coco", source, {}, WHERE)
    assert one_line(error).startswith(
        f"{annotations}: images[2]: path '../../outside/COCO_test_000002.jpg' leaves"
    )


NLPHUJI = {
    "format": "nlphuji_csv_zip",
    "annotations": "test_1k_flickr.csv",
    "archive": "images_flickr_1k_test.zip",
}


def test_an_nlphuji_filename_that_is_a_path_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "flickr"
    write_nlphuji_repo(root, n_images=3)
    rewrite_csv_cell(root / NLPHUJI["annotations"], 1, "filename", "../1000001.jpg")
    with pytest.raises(VlbenchError) as error:
        flickr_coco.load_nlphuji(root, {"path": str(root), **NLPHUJI}, {}, WHERE)
    assert one_line(error).startswith(
        f"{root / NLPHUJI['annotations']}: line 3: path '../1000001.jpg' leaves the archive"
    )


@pytest.mark.parametrize("member", ["../../evil.jpg", "/abs/evil.jpg"])
def test_a_zip_member_outside_the_archive_is_refused(tmp_path: Path, member: str) -> None:
    root = tmp_path / "flickr"
    write_nlphuji_repo(root, n_images=2)
    archive = root / NLPHUJI["archive"]
    with zipfile.ZipFile(archive, "a") as zipped:
        zipped.writestr(member, image_bytes(5))
    data = flickr_coco.load_nlphuji(root, {"path": str(root), **NLPHUJI}, {}, WHERE)
    with pytest.raises(VlbenchError) as error:
        list(data.images)
    message = one_line(error)
    assert message.startswith(f"{archive}: path '{member}'")
    assert ("absolute" if member.startswith("/") else "leaves the archive") in message


@pytest.mark.parametrize("member", ["../evil.jpg", "/abs/evil.txt"])
def test_a_tar_member_outside_the_archive_is_refused(tmp_path: Path, member: str) -> None:
    shard = tmp_path / "wds" / "test" / "0.tar"
    shard.parent.mkdir(parents=True)
    with tarfile.open(shard, "w") as tar:
        for name, data in (("s0.jpg", image_bytes(1)), ("s0.txt", b"a cat"), (member, b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(VlbenchError) as error:
        flickr_coco.load_wds(tmp_path / "wds", {"path": str(tmp_path / "wds")}, {}, WHERE)
    assert one_line(error).startswith(f"{shard}: path '{member}'")
