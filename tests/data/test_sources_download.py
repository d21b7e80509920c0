"""Hub downloads against a loopback hub: pinned, retried with backoff, verified, failing fast."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from fixtures_sources import write_biovita_repo
from huggingface_hub import errors
from loopback_hub import LoopbackHub
from workflow_helpers import tiny_model, validate

from vlbench.data.prepare import prepare_benchmark
from vlbench.data.sources import download
from vlbench.errors import VlbenchError

REPO = "myang333/BioVITAI2TRetrieval"
SHA = "fa7f2ac1456130e7158958e4324f981bb5308668"


def hub_error(cls: type[Exception], message: str = "from the fake hub") -> Exception:
    """An instance of a huggingface_hub HTTP error class without a real HTTP response."""
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.response = None
    return error


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def test_missing_revision_is_one_line_with_no_retry() -> None:
    calls, sleeps = [], Sleeps()

    def call() -> None:
        calls.append(1)
        raise hub_error(errors.RevisionNotFoundError)

    with pytest.raises(VlbenchError) as info:
        download.with_retries(call, REPO, SHA, sleep=sleeps)
    assert str(info.value) == f"dataset {REPO}: revision {SHA} does not exist"
    assert "\n" not in str(info.value)
    assert len(calls) == 1 and sleeps == []


@pytest.mark.parametrize(
    "cls", [errors.RepositoryNotFoundError, errors.GatedRepoError, errors.RemoteEntryNotFoundError]
)
def test_other_permanent_errors_are_not_retried(cls: type[Exception]) -> None:
    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        raise hub_error(cls)

    with pytest.raises(VlbenchError, match=f"dataset {REPO}"):
        download.with_retries(call, REPO, SHA, sleep=Sleeps())
    assert len(calls) == 1


def test_transient_failures_back_off_then_succeed() -> None:
    outcomes: list[Any] = [ConnectionError("reset"), TimeoutError("slow"), "done"]
    sleeps = Sleeps()

    def call() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert download.with_retries(call, REPO, SHA, sleep=sleeps) == "done"
    assert sleeps == [2.0, 4.0]


def test_persistent_failure_gives_up_after_the_last_attempt() -> None:
    sleeps = Sleeps()

    def call() -> None:
        raise ConnectionError("network unreachable")

    with pytest.raises(VlbenchError, match=r"failed after 5 attempts .*network unreachable"):
        download.with_retries(call, REPO, SHA, sleep=sleeps)
    assert sleeps == [2.0, 4.0, 8.0, 16.0]


@pytest.mark.parametrize("revision", ["UNPINNED", "", "main"])
def test_an_unlocked_revision_fails_before_any_request(loopback_hub, revision: str) -> None:
    with pytest.raises(VlbenchError, match=r"is not pinned .* and not locked; run `vlbench lock"):
        download.fetch_snapshot(REPO, revision, ["*"], where="benchmarks.x.source.revision")
    assert loopback_hub.requests == []


def hub_source(subset: str = "unseen_species", revision: str | None = None) -> dict[str, Any]:
    source = {"repo": REPO, "split": "test", "subset": subset}
    return {**source, "revision": revision} if revision else source


@pytest.fixture
def biovita_hub(loopback_hub: LoopbackHub, tmp_path: Path) -> tuple[LoopbackHub, str]:
    """The loopback hub serving a miniature BioVITA repository; returns (hub, its commit)."""
    origin = tmp_path / "origin"
    write_biovita_repo(origin, n_queries=6)
    return loopback_hub, loopback_hub.commit_folder("dataset", REPO, origin)


CORPUS = "unseen_species-corpus/test-00000-of-00001.parquet"


def prepare(source: dict[str, Any], out: Path) -> dict[str, Any]:
    return prepare_benchmark("biovita", "taxon_candidates", source, None, out)


def test_hub_source_fetches_only_its_subset_verifies_and_prepares(biovita_hub, tmp_path) -> None:
    hub, sha = biovita_hub
    meta = prepare(hub_source(revision=sha), tmp_path / "out")
    assert meta["repo"] == REPO and meta["revision"] == sha and meta["source"] == "hub"
    assert meta["subset"] == "unseen_species" and meta["split"] == "test"
    downloaded = [
        path for method, path, _ in hub.requests if method == "GET" and "/resolve/" in path
    ]
    assert downloaded and all("unseen_genus" not in path for path in downloaded)
    assert all(f"/datasets/{REPO}/resolve/{sha}/" in path for path in downloaded)
    assert pq.read_table(tmp_path / "out" / "images.parquet").num_rows == 6


def test_a_server_error_is_answered_by_a_retry(biovita_hub, tmp_path) -> None:
    hub, sha = biovita_hub
    hub.fail(f"/resolve/{sha}/{CORPUS}", status=500)
    prepare(hub_source(revision=sha), tmp_path / "out")
    assert hub.served("HEAD", CORPUS)[0] == 500 and hub.served("GET", CORPUS) == [200]


def test_a_truncated_download_is_fetched_again_and_verified(biovita_hub, tmp_path) -> None:
    hub, sha = biovita_hub
    hub.truncate(CORPUS)
    prepare(hub_source(revision=sha), tmp_path / "out")
    # huggingface_hub asked again (from the bytes it had kept, here none) and the file verified
    assert len(hub.served("GET", CORPUS)) == 2


def test_a_file_with_a_wrong_sha256_fails_naming_it(biovita_hub, tmp_path) -> None:
    hub, sha = biovita_hub
    hub.corrupt(CORPUS)
    with pytest.raises(VlbenchError, match=f"{CORPUS}: sha256 .* does not match the published"):
        prepare(hub_source(revision=sha), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_revision_that_does_not_exist(biovita_hub, tmp_path) -> None:
    with pytest.raises(VlbenchError, match=f"^dataset {REPO}: revision 0{{40}} does not exist$"):
        prepare(hub_source(revision="0" * 40), tmp_path / "out")


def test_an_unknown_repository(loopback_hub, tmp_path) -> None:
    with pytest.raises(VlbenchError, match=f"^dataset {REPO}: repository not found"):
        prepare(hub_source(revision=SHA), tmp_path / "out")


def test_an_unpinned_source_resolves_its_branch_and_is_locked(biovita_hub, tmp_path) -> None:
    """Planning pins it through the real client (HfApi.dataset_info), then the job downloads."""
    from vlbench.planning.lockfile import read_lock
    from vlbench.planning.pinning import plan_pins

    hub, sha = biovita_hub
    config = validate({"models": {"m": tiny_model()}, "benchmarks": {"b": {
        "protocol": "taxon_candidates", "source": hub_source()}}})  # fmt: skip
    lock = tmp_path / "c.lock"
    planned, _, warnings = plan_pins(config, lock, "c.yaml", resolve=True)
    assert warnings == [] and read_lock(lock)[f"dataset {REPO}"].commit == sha
    assert hub.served("GET", f"/api/datasets/{REPO}/revision/main") == [200]
    meta = prepare(planned["benchmarks"]["b"]["source"], tmp_path / "out")
    assert meta["revision"] == sha


def build_origin(kind: str, origin: Path) -> tuple[str, dict[str, Any], int]:
    """A miniature repo of `kind`; returns (protocol, layout keys of its source, image count)."""
    from fixtures_sources import (
        write_inquire_repo,
        write_nlphuji_repo,
        write_rare_species_repo,
        write_wds_repo,
    )

    from vlbench.data.synthetic import write_synthetic_biomedflickr

    if kind == "biomedflickr":
        write_synthetic_biomedflickr(origin, pairs=6, seed=4)
        return "paired", {}, 6
    if kind == "rare-species":
        write_rare_species_repo(origin, per_class=1)
        return (
            "zeroshot",
            {"annotations": "metadata.csv", "columns": {"file": "file_name", "common": "common"}},
            4,
        )
    if kind == "inquire":
        write_inquire_repo(origin, n_queries=2, per_query=5)
        return "rerank", {"split": "validation"}, -1
    if kind == "nlphuji":
        write_nlphuji_repo(origin, n_images=4)
        layout = {
            "format": "nlphuji_csv_zip",
            "annotations": "test_1k_flickr.csv",
            "archive": "images_flickr_1k_test.zip",
        }
        return "multi_positive", layout, 4
    write_wds_repo(origin, n_images=5, per_shard=2)
    return "multi_positive", {"format": "clip_benchmark_wds"}, 5


@pytest.mark.parametrize("kind", ["biomedflickr", "rare-species", "inquire", "nlphuji", "wds"])
def test_every_hub_format_downloads_only_what_it_reads(
    kind: str, tmp_path: Path, loopback_hub: LoopbackHub
) -> None:
    origin = tmp_path / "origin"
    protocol, layout, n_images = build_origin(kind, origin)
    (origin / "unrelated.bin").write_bytes(b"never fetched")
    sha = loopback_hub.commit_folder("dataset", "org/name", origin)
    source = {"repo": "org/name", "revision": sha, **layout}
    meta = prepare_benchmark(kind, protocol, source, None, tmp_path / "out")
    assert meta["revision"] == sha and meta["repo"] == "org/name"
    assert loopback_hub.served("GET", "unrelated.bin") == []
    if n_images > 0:
        assert meta["n_images"] == n_images
