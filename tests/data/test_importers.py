"""`vlbench import`: each publisher's layout, in miniature, becomes the folder the shipped
config reads; a wrong layout is a one-line error and leaves nothing behind.

The fixtures are written in the publishers' layouts with their real file names and columns;
where each layout was read is cited in the importer modules (src/vlbench/data/importers/) and
repeated at each fixture.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures_publishers import (
    CORNELL,
    PLANTID,
    write_meta_album,
    write_nabirds,
    write_retrieval,
)
from workflow_helpers import REPO, validate

from vlbench.atomic import CRASH_ENV
from vlbench.cli import main as cli_main
from vlbench.data.importers.biocap_retrieval import import_retrieval
from vlbench.data.importers.meta_album import import_meta_album
from vlbench.data.importers.nabirds import import_nabirds
from vlbench.data.sources import classification, csv_pairs
from vlbench.errors import VlbenchError
from vlbench.planning import preflight as pf
from vlbench.planning.data_root import expand_data_root

SHIPPED = yaml.safe_load((REPO / "config" / "biocap.yaml").read_text(encoding="utf-8"))


def shipped(key: str, dest: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A benchmark entry of config/biocap.yaml as shipped, its source folder moved to `dest`
    and its reference file (BioCAP's metadata.csv) the one the import wrote in BioCAP's layout,
    as the prepare job hands the loader the fetched copy."""
    spec = SHIPPED["benchmarks"][key]
    source = {**spec["source"], "path": str(dest)}
    if "reference" in source:
        source["reference"] = {**source["reference"], "local": str(dest / "metadata.csv")}
    return spec, source


def leftovers(parent: Path) -> list[str]:
    """Anything an import left beside its DEST (a partial folder would show here)."""
    if not parent.exists():
        return []
    return sorted(path.name for path in parent.iterdir() if path.name.startswith("."))


# BioCAP's data/classification_annotation/nabirds/metadata.csv starts with exactly these rows.
NABIRDS_METADATA = (
    ",filepath,class\n"
    "0,0817/0000139e21dc4d0cbfe14cae3c85c829.jpg,Oak Titmouse\n"
    "1,0860/0000d9fc4e024c06a0afa55cfb16b12b.jpg,Ovenbird\n"
    "2,0900/000193069d834334b255a447742edce3.jpg,Savannah Sparrow\n"
    "3,0645/0001afd499a14b23b67f2d3e5b8a6f10.JPG,Eared Grebe (Nonbreeding/juvenile)\n"
)


def test_nabirds_release_becomes_biocaps_metadata_and_class_folders(tmp_path: Path) -> None:
    src, dest = write_nabirds(tmp_path), tmp_path / "data" / "nabirds"
    result = import_nabirds(src, dest)
    assert (dest / "metadata.csv").read_text(encoding="utf-8") == NABIRDS_METADATA
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [
        "0645/0001afd499a14b23b67f2d3e5b8a6f10.JPG",
        "0817/0000139e21dc4d0cbfe14cae3c85c829.jpg",
        "0860/0000d9fc4e024c06a0afa55cfb16b12b.jpg",
        "0900/000193069d834334b255a447742edce3.jpg",
        "metadata.csv",
    ]
    published = src / "images" / "0817/0000139e21dc4d0cbfe14cae3c85c829.jpg"
    assert (dest / "0817/0000139e21dc4d0cbfe14cae3c85c829.jpg").stat().st_ino == (
        published.stat().st_ino
    )  # hard-linked, not copied
    assert (result.images, result.linked, result.copied) == (4, 4, 0)
    assert "Not byte-identical to BioCAP's" in result.summary()  # four rows, not 48,562
    spec, source = shipped("nabirds", dest)
    data = classification.load(dest, source, spec, "benchmarks.nabirds.source")
    images = list(data.images)
    assert [(record.image_id, record.group) for record in images] == [
        (line.split(",", 2)[1], line.split(",", 2)[2]) for line in NABIRDS_METADATA.splitlines()[1:]
    ]
    assert images[0].read() == published.read_bytes()
    assert data.info["n_classes"] == 4 and data.info["n_templates"] == 80
    assert leftovers(dest.parent) == []


def test_nabirds_errors_name_the_file_and_leave_nothing(tmp_path: Path) -> None:
    src, dest = write_nabirds(tmp_path), tmp_path / "data" / "nabirds"
    (src / "classes.txt").unlink()
    with pytest.raises(VlbenchError) as error:
        import_nabirds(src, dest)
    assert str(error.value) == (
        f"{src}/classes.txt: file not found (the NABirds release: images.txt, classes.txt, "
        "image_class_labels.txt, train_test_split.txt and images/)"
    )
    src = write_nabirds(tmp_path / "again")
    (src / "images" / "0860/0000d9fc4e024c06a0afa55cfb16b12b.jpg").unlink()
    with pytest.raises(VlbenchError, match=r"1 image\(s\) listed in images.txt are absent"):
        import_nabirds(src, dest)
    lines = (src / "image_class_labels.txt").read_text().splitlines()
    (src / "image_class_labels.txt").write_text("\n".join(lines[1:]) + "\n")
    with pytest.raises(VlbenchError, match=r"image_class_labels.txt: no line for 1 image"):
        import_nabirds(src, dest)
    assert not dest.exists() and leftovers(dest.parent) == []


def test_biocaps_metadata_checks_every_row_and_sets_the_order(tmp_path: Path) -> None:
    src, dest = write_nabirds(tmp_path), tmp_path / "out"
    lines = NABIRDS_METADATA.splitlines()[1:]
    reordered = [line.split(",", 1)[1] for line in reversed(lines)]
    metadata = tmp_path / "biocap-metadata.csv"
    metadata.write_text(
        ",filepath,class\n" + "".join(f"{n},{r}\n" for n, r in enumerate(reordered))
    )
    import_nabirds(src, dest, metadata=metadata)
    written = (dest / "metadata.csv").read_text(encoding="utf-8").splitlines()[1:]
    assert [line.split(",", 1)[1] for line in written] == reordered
    metadata.write_text(metadata.read_text().replace("Ovenbird", "Ovenbird (Adult)"))
    with pytest.raises(VlbenchError, match=r"line 4: '0860/.*' has class 'Ovenbird \(Adult\)'"):
        import_nabirds(src, tmp_path / "other", metadata=metadata)


def test_meta_album_release_becomes_biocaps_class_folders(tmp_path: Path) -> None:
    src, dest = write_meta_album(tmp_path), tmp_path / "data" / "meta-album" / "FNG"
    result = import_meta_album(src, dest)
    pilat = "Agaricus impudicus (Rea) Pila\u0301t"  # NFD, as BioCAP's file holds it
    assert (dest / "metadata.csv").read_text(encoding="utf-8") == (
        ",filepath,class\n"
        "0,Amanita excelsa Gonn. & Rabenh./2816361340-208034.JPG,Amanita excelsa Gonn. & Rabenh.\n"
        "1,Amanita excelsa Gonn. & Rabenh./2238470283-18312.JPG,Amanita excelsa Gonn. & Rabenh.\n"
        f"2,{pilat}/2238359494-87452.JPG,{pilat}\n"
        f"3,{pilat}/2238091808-6032.JPG,{pilat}\n"
    )
    assert (dest / pilat / "2238091808-6032.JPG").read_bytes() == (
        src / "images" / "2238091808-6032.JPG"
    ).read_bytes()
    assert result.images == 4
    spec, source = shipped("metaalbum-fungi", dest)
    data = classification.load(dest, source, spec, "benchmarks.metaalbum-fungi.source")
    assert [record.group for record in data.images] == [
        "Amanita excelsa Gonn. & Rabenh.",
        "Amanita excelsa Gonn. & Rabenh.",
        pilat,
        pilat,
    ]
    assert data.info["n_classes"] == 2


def test_meta_album_wrong_layout_is_one_line_naming_the_columns(tmp_path: Path) -> None:
    src = write_meta_album(tmp_path, columns=("FILE_NAME", "LABEL"))
    (src / "info.json").unlink()
    dest = tmp_path / "FNG"
    with pytest.raises(VlbenchError) as error:
        import_meta_album(src, dest)
    assert str(error.value) == (
        f"{src}/labels.csv: missing column(s) CATEGORY (has: FILE_NAME, LABEL, SUPER_CATEGORY)"
    )
    assert not dest.exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("name", "csv_name", "items"),
    [("cornell-bird", "cornell_bird.csv", CORNELL), ("plantid", "plantID.csv", PLANTID)],
)
def test_downloaded_images_become_biocaps_id_jpg_folder(
    tmp_path: Path, name: str, csv_name: str, items: list[tuple[str, str, str, str]]
) -> None:
    src, dest = write_retrieval(tmp_path, csv_name, items), tmp_path / "data" / name
    annotations = tmp_path / csv_name
    with pytest.raises(VlbenchError, match=rf"is not that of BioCAP's {csv_name} at commit"):
        import_retrieval(name, src, dest, annotations=annotations)
    result = import_retrieval(
        name, src, dest, annotations=annotations, allow_other_annotations=True
    )
    assert (dest / csv_name).read_bytes() == annotations.read_bytes()
    assert sorted(path.name for path in (dest / "images").iterdir()) == sorted(
        f"{item_id}.jpg" for item_id, *_ in items
    )
    assert "is not BioCAP's file" in result.summary()
    spec, source = shipped(name, dest)
    data = csv_pairs.load(dest, source, spec, f"benchmarks.{name}.source")
    assert [text for _, text, _ in data.texts] == [f"a photo of{item[2]}" for item in items]
    assert [record.read() for record in data.images] == [
        (src / item[3]).read_bytes() for item in items
    ]  # read through the loader's md5 check


def test_retrieval_md5_mismatch_and_absent_images_are_one_line(tmp_path: Path) -> None:
    src = write_retrieval(tmp_path, "cornell_bird.csv", CORNELL)
    annotations, dest = tmp_path / "cornell_bird.csv", tmp_path / "cornell-bird"
    (src / "402356").write_bytes(b"not the published bytes")
    with pytest.raises(VlbenchError) as error:
        import_retrieval("cornell-bird", src, dest, annotations=annotations,
                         allow_other_annotations=True)  # fmt: skip
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"{src}: 1 of 2 images do not match their published md5 (402356:")
    (src / "402356").unlink()
    with pytest.raises(VlbenchError, match=r"1 of 2 images listed in cornell_bird.csv are absent"):
        import_retrieval("cornell-bird", src, dest, annotations=annotations,
                         allow_other_annotations=True)  # fmt: skip
    assert not dest.exists() and leftovers(tmp_path) == []


# --- writing DEST ------------------------------------------------------------------------
def test_an_existing_dest_is_kept_unless_replaced_and_copy_makes_copies(tmp_path: Path) -> None:
    src, dest = write_meta_album(tmp_path), tmp_path / "FNG"
    dest.mkdir()
    (dest / "mine.txt").write_text("keep me")
    with pytest.raises(VlbenchError, match=r"FNG: the folder already exists; pass --replace"):
        import_meta_album(src, dest)
    assert (dest / "mine.txt").read_text() == "keep me"
    result = import_meta_album(src, dest, replace=True, copy=True)
    assert not (dest / "mine.txt").exists() and (result.linked, result.copied) == (0, 4)
    copied = next(dest.rglob("2816361340-208034.JPG"))
    assert copied.stat().st_ino != (src / "images" / "2816361340-208034.JPG").stat().st_ino


def test_vlbench_import_on_the_command_line(tmp_path: Path, capsys) -> None:
    src, dest = write_nabirds(tmp_path), tmp_path / "data" / "nabirds"
    assert cli_main(["import", "nabirds", str(src), str(dest)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {dest}: 4 images (4 hard-linked, 0 copied).")
    assert (dest / "metadata.csv").read_text(encoding="utf-8") == NABIRDS_METADATA
    assert cli_main(["import", "nabirds", str(src), str(dest)]) == 1
    error = capsys.readouterr().err
    assert (
        error == f"vlbench error: {dest}: the folder already exists; pass --replace to replace it\n"
    )
    with pytest.raises(SystemExit):  # argparse: --annotations is required
        cli_main(["import", "plantid", str(src), str(tmp_path / "p")])


def test_an_import_killed_before_its_rename_leaves_no_dest(tmp_path: Path) -> None:
    src, dest = write_meta_album(tmp_path), tmp_path / "data" / "FNG"
    command = [sys.executable, "-m", "vlbench.cli", "import", "meta-album", str(src), str(dest)]
    env = {**os.environ, CRASH_ENV: str(dest)}
    killed = subprocess.run(command, env=env, start_new_session=True, capture_output=True)
    assert killed.returncode == -9 and not dest.exists()
    assert all(name.endswith(".partial") for name in leftovers(dest.parent))  # hidden, unfinished
    env.pop(CRASH_ENV)
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (dest / "metadata.csv").is_file()


# --- the config and the preflight -------------------------------------------------------
def test_every_user_supplied_biocap_benchmark_names_its_importer() -> None:
    """(The schema's `importer` enum is checked against IMPORTERS in tests/test_registries.py.)"""
    named = {key: spec.get("importer") for key, spec in SHIPPED["benchmarks"].items()}
    local = {key for key, spec in SHIPPED["benchmarks"].items() if "path" in spec["source"]}
    assert {key: named[key] for key in local} == {
        "nabirds": "nabirds",
        **{key: "meta-album" for key in local if key.startswith("metaalbum-")},
        "cornell-bird": "cornell-bird",
        "plantid": "plantid",
    }
    assert len(local) == 10


def test_preflight_names_the_import_command_for_a_missing_folder(tmp_path: Path) -> None:
    config = {
        "data_root": str(tmp_path),
        "models": {"m": {"name": "hf-hub:org/m", "revision": "a" * 40}},
        "benchmarks": {
            "plantid": {
                "protocol": "paired",
                "importer": "plantid",
                "source": SHIPPED["benchmarks"]["plantid"]["source"],
            },
            "no-hint": {"protocol": "paired", "source": {"path": "{data_root}/other"}},
        },
    }
    rows = {row.key: row for row in pf.preflight_rows(expand_data_root(validate(config)), {})}
    assert rows["plantid"].detail == (
        f"benchmarks.plantid.source.path: directory not found: {tmp_path}/plantid "
        "(needs the annotation CSV (id, source_url, captions, md5) + <images>/<id>.jpg); "
        f"make it with: vlbench import plantid SRC {tmp_path}/plantid --annotations plantID.csv"
    )
    assert "vlbench import" not in rows["no-hint"].detail
