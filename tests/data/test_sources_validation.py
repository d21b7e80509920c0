"""Load-time validation and the skip policy of the canonical writer, on hand-made sources."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from fixtures_sources import BROKEN, image_bytes
from workflow_helpers import validate

from vlbench.data.sources import FORMATS
from vlbench.data.sources.records import Candidates, ImageRecord, SourceData
from vlbench.data.sources.writer import write_canonical
from vlbench.errors import VlbenchError

GOOD = image_bytes(1)


def images(*items: tuple[str, bytes]) -> Iterator[ImageRecord]:
    for image_id, data in items:
        yield ImageRecord(image_id, data)


def write(tmp_path: Path, data: SourceData, protocol: str = "paired", **kwargs: Any) -> dict:
    return write_canonical(data, protocol, tmp_path / "out", {"split": "test"}, **kwargs)


def rows(tmp_path: Path, name: str) -> list[dict[str, Any]]:
    return pq.read_table(tmp_path / "out" / f"{name}.parquet").to_pylist()


def test_duplicate_image_ids_fail(tmp_path: Path) -> None:
    data = SourceData(images(("a", GOOD), ("a", GOOD)), [("t", "x", None)], [])
    with pytest.raises(VlbenchError, match="duplicate image id 'a'"):
        write(tmp_path, data)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_duplicate_text_ids_fail(tmp_path: Path) -> None:
    data = SourceData(images(("a", GOOD)), [("t", "x", None), ("t", "y", None)], [])
    with pytest.raises(VlbenchError, match="duplicate text id"):
        write(tmp_path, data)


def test_judgement_naming_an_unknown_item_fails(tmp_path: Path) -> None:
    data = SourceData(images(("a", GOOD)), [("t", "x", None)], [("a", "nope", 1)])
    with pytest.raises(VlbenchError, match="unknown text id 'nope'"):
        write(tmp_path, data)


def test_candidate_naming_an_unknown_item_fails(tmp_path: Path) -> None:
    data = SourceData(
        images(("a", GOOD)),
        [("t", "x", None)],
        [("a", "t", 1)],
        [Candidates("text", "t", ["a", "ghost"])],
    )
    with pytest.raises(VlbenchError, match="candidate id\\(s\\) not in the gallery: 'ghost'"):
        write(tmp_path, data, "rerank")


def test_whitespace_text_fails(tmp_path: Path) -> None:
    data = SourceData(images(("a", GOOD)), [("t", "  \n", None)], [("a", "t", 1)])
    with pytest.raises(VlbenchError, match="text 't' is empty after processing"):
        write(tmp_path, data)


def test_skip_drops_an_image_with_its_captions_in_multi_positive(tmp_path: Path) -> None:
    data = SourceData(
        images(("a", GOOD), ("b", BROKEN), ("c", image_bytes(2))),
        [("a#0", "x", None), ("b#0", "y", None), ("b#1", "z", None), ("c#0", "w", None)],
        [("a", "a#0", 1), ("b", "b#0", 1), ("b", "b#1", 1), ("c", "c#0", 1)],
    )
    meta = write(tmp_path, data, "multi_positive", image_policy="skip")
    assert [r["image_id"] for r in rows(tmp_path, "images")] == ["a", "c"]
    assert [r["text_id"] for r in rows(tmp_path, "texts")] == ["a#0", "c#0"]
    assert {r["image_id"] for r in rows(tmp_path, "qrels")} == {"a", "c"}
    assert meta["skipped_images"][0]["image_id"] == "b" and meta["n_source_images"] == 3


def test_skip_removes_an_image_from_rerank_candidate_lists_but_keeps_the_query(
    tmp_path: Path,
) -> None:
    data = SourceData(
        images(("a", GOOD), ("b", BROKEN)),
        [("q", "a query", "Species")],
        [("a", "q", 1), ("b", "q", 0)],
        [Candidates("text", "q", ["b", "a"])],
    )
    write(tmp_path, data, "rerank", image_policy="skip")
    assert rows(tmp_path, "candidates")[0]["candidate_ids"] == ["a"]
    assert [r["text_id"] for r in rows(tmp_path, "texts")] == ["q"]
    assert rows(tmp_path, "qrels") == [{"image_id": "a", "text_id": "q", "relevance": 1}]


def test_skip_drops_a_taxon_query_and_its_candidate_list(tmp_path: Path) -> None:
    data = SourceData(
        images(("q1", GOOD), ("q2", BROKEN)),
        [("d1", "Panthera", "Panthera")],
        [("q1", "d1", 1), ("q2", "d1", 1)],
        [
            Candidates("image", "q1", ["d1"], ["Panthera"]),
            Candidates("image", "q2", ["d1"], ["Panthera"]),
        ],
    )
    write(tmp_path, data, "taxon_candidates", image_policy="skip")
    assert [r["query_id"] for r in rows(tmp_path, "candidates")] == ["q1"]
    assert [r["text_id"] for r in rows(tmp_path, "texts")] == ["d1"]


def test_expected_text_count(tmp_path: Path) -> None:
    data = SourceData(images(("a", GOOD)), [("t", "x", None)], [("a", "t", 1)])
    with pytest.raises(VlbenchError, match=r"expected 2 texts .* found 1"):
        write(tmp_path, data, expected={"texts": 2})


def config_with(source: dict[str, Any], **benchmark: Any) -> dict[str, Any]:
    return {
        "models": {"m": {"name": "ViT-B-32", "pretrained": "openai"}},
        "benchmarks": {
            "b": {"protocol": benchmark.pop("protocol", "paired"), "source": source, **benchmark}
        },
    }


def test_schema_accepts_every_format_and_protocol_option() -> None:
    for name in FORMATS:
        config = config_with({"path": "x", "format": name}, protocol=FORMATS[name].protocol)
        validate(config)
    validated = validate(
        config_with(
            {
                "repo": "a/b",
                "revision": "UNPINNED",
                "annotations": ["x.csv", "y.csv"],
                "columns": {"file": "file_name"},
                "expected": {"images": 3},
            },
            protocol="zeroshot",
            text_type="taxon_com",
            templates="none",
        )
    )
    assert validated["benchmarks"]["b"]["image_policy"] == "fail"


@pytest.mark.parametrize(
    ("source", "benchmark", "message"),
    [
        ({"path": "x", "format": "parquet"}, {}, "benchmarks.b.source"),
        ({"repo": "a/b", "revision": "main"}, {}, "benchmarks.b.source"),
        ({"path": "x", "columns": {"filename": "f"}}, {}, "benchmarks.b.source"),
        ({"path": "x"}, {"text_type": "latin"}, "benchmarks.b.text_type"),
        ({"path": "x"}, {"image_policy": "ignore"}, "benchmarks.b.image_policy"),
        ({"path": "x", "expected": {"rows": 3}}, {}, "benchmarks.b.source"),
    ],
)
def test_schema_rejects_bad_source_options(
    source: dict[str, Any], benchmark: dict[str, Any], message: str
) -> None:
    with pytest.raises(VlbenchError, match=message):
        validate(config_with(source, **benchmark))


def test_a_corrupt_archive_is_a_one_line_error(tmp_path: Path) -> None:
    from fixtures_sources import write_nlphuji_repo

    from vlbench.data.prepare import prepare_benchmark

    write_nlphuji_repo(tmp_path / "repo", n_images=3)
    (tmp_path / "repo" / "images_flickr_1k_test.zip").write_bytes(b"PK\x03\x04 truncated")
    source = {
        "path": str(tmp_path / "repo"),
        "format": "nlphuji_csv_zip",
        "annotations": "test_1k_flickr.csv",
        "archive": "images_flickr_1k_test.zip",
    }
    with pytest.raises(VlbenchError, match=r"cannot read .*BadZipFile") as info:
        prepare_benchmark("f", "multi_positive", source, None, tmp_path / "out")
    assert "\n" not in str(info.value)


def test_a_corrupt_parquet_shard_is_a_one_line_error(tmp_path: Path) -> None:
    from vlbench.data.prepare import prepare_benchmark
    from vlbench.data.synthetic import write_synthetic_biomedflickr

    write_synthetic_biomedflickr(tmp_path / "repo", pairs=3, seed=0)
    shard = next((tmp_path / "repo" / "data").glob("*.parquet"))
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(VlbenchError, match="cannot read"):
        prepare_benchmark("b", "paired", {"path": str(tmp_path / "repo")}, None, tmp_path / "o")
