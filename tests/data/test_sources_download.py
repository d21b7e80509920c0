"""Hub downloads without a network: pinned, retried with backoff, verified, failing fast."""

from __future__ import annotations

import fnmatch
import hashlib
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import huggingface_hub
import pyarrow.parquet as pq
import pytest
from fixtures_sources import write_biovita_repo
from huggingface_hub import errors

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


def test_unpinned_revision_fails_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(huggingface_hub, "snapshot_download", pytest.fail)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", pytest.fail)
    with pytest.raises(VlbenchError, match=r"is not pinned .*'UNPINNED'.*commits/main"):
        download.fetch_snapshot(REPO, "UNPINNED", ["*"], where="benchmarks.x.source.revision")


class FakeHub:
    """Serves one local folder as a pinned hub dataset repo, honouring allow_patterns."""

    def __init__(self, origin: Path, cache: Path, revision: str = SHA) -> None:
        self.origin, self.cache, self.revision = origin, cache, revision
        self.requested: list[list[str]] = []
        self.tamper: set[str] = set()

    def _check(self, repo_id: str, revision: str) -> None:
        if revision != self.revision:
            raise hub_error(errors.RevisionNotFoundError)

    def hf_hub_download(self, repo_id: str, filename: str, **kwargs: Any) -> str:
        self._check(repo_id, kwargs["revision"])
        target = self.cache / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.origin / filename, target)
        return str(target)

    def snapshot_download(self, repo_id: str, allow_patterns: list[str], **kwargs: Any) -> str:
        self._check(repo_id, kwargs["revision"])
        self.requested.append(list(allow_patterns))
        for path in self.origin.rglob("*"):
            relative = str(path.relative_to(self.origin))
            if path.is_file() and any(fnmatch.fnmatch(relative, p) for p in allow_patterns):
                target = self.cache / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, target)
        return str(self.cache)

    def get_paths_info(self, repo_id: str, paths: list[str], **kwargs: Any) -> list[Any]:
        infos = []
        for relative in paths:
            digest = hashlib.sha256((self.origin / relative).read_bytes()).hexdigest()
            if relative in self.tamper:
                digest = "0" * 64
            infos.append(SimpleNamespace(path=relative, lfs=SimpleNamespace(sha256=digest)))
        return infos


@pytest.fixture
def fake_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    origin = tmp_path / "origin"
    write_biovita_repo(origin, n_queries=6)
    hub = FakeHub(origin, tmp_path / "cache")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hub.hf_hub_download)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub.snapshot_download)
    monkeypatch.setattr(
        huggingface_hub.HfApi, "get_paths_info", lambda self, *a, **k: hub.get_paths_info(*a, **k)
    )
    return hub


def hub_source(subset: str = "unseen_species", revision: str = SHA) -> dict[str, Any]:
    return {"repo": REPO, "revision": revision, "split": "test", "subset": subset}


def test_hub_source_fetches_only_its_subset_verifies_and_prepares(
    fake_hub: FakeHub, tmp_path: Path
) -> None:
    meta = prepare_benchmark("biovita", "taxon_candidates", hub_source(), None, tmp_path / "out")
    assert meta["repo"] == REPO and meta["revision"] == SHA and meta["source"] == "hub"
    assert meta["subset"] == "unseen_species" and meta["split"] == "test"
    (patterns,) = fake_hub.requested
    assert all("unseen_species" in p for p in patterns if p != "README.md")
    assert not list((tmp_path / "cache").glob("unseen_genus-*"))
    assert pq.read_table(tmp_path / "out" / "images.parquet").num_rows == 6


def test_hub_file_with_a_wrong_sha256_fails_naming_it(fake_hub: FakeHub, tmp_path: Path) -> None:
    fake_hub.tamper.add("unseen_species-corpus/test-00000-of-00001.parquet")
    with pytest.raises(
        VlbenchError, match=r"unseen_species-corpus/test-00000-of-00001.parquet: sha256"
    ):
        prepare_benchmark("biovita", "taxon_candidates", hub_source(), None, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_hub_source_with_a_revision_that_does_not_exist(fake_hub: FakeHub, tmp_path: Path) -> None:
    with pytest.raises(
        VlbenchError, match=r"^dataset myang333/BioVITAI2TRetrieval: revision 0{40}"
    ):
        prepare_benchmark(
            "biovita", "taxon_candidates", hub_source(revision="0" * 40), None, tmp_path / "out"
        )


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
        return "zeroshot", {"annotations": "metadata.csv", "columns": {"file": "file_name"}}, 4
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
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin = tmp_path / "origin"
    protocol, layout, n_images = build_origin(kind, origin)
    (origin / "unrelated.bin").write_bytes(b"never fetched")
    hub = FakeHub(origin, tmp_path / "cache")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hub.hf_hub_download)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub.snapshot_download)
    monkeypatch.setattr(
        huggingface_hub.HfApi, "get_paths_info", lambda self, *a, **k: hub.get_paths_info(*a, **k)
    )
    source = {"repo": "org/name", "revision": SHA, **layout}
    meta = prepare_benchmark(kind, protocol, source, None, tmp_path / "out")
    assert meta["revision"] == SHA and meta["repo"] == "org/name"
    assert not (tmp_path / "cache" / "unrelated.bin").exists()
    if n_images > 0:
        assert meta["n_images"] == n_images


OFFLINE_SCRIPT = """
import sys
from vlbench.errors import VlbenchError
from vlbench.data.sources import download

download.ATTEMPTS, download.FIRST_DELAY_S = 2, 0.01
repo, sha, cache = sys.argv[1:4]
calls = [
    lambda: download.with_retries(
        lambda: download.published_sha256(repo, sha, ["data/test.parquet"]), repo, sha
    ),
    lambda: download.fetch_snapshot(repo, sha, ["data/*"], cache_dir=cache),
]
for call in calls:
    try:
        call()
    except VlbenchError as error:
        print(error)
"""


def test_unreachable_hub_is_named_with_how_to_run_offline(tmp_path: Path) -> None:
    """For real: HF_ENDPOINT on a closed local port, no HF_HUB_OFFLINE, the real client.

    The second call is a download, which huggingface_hub itself retries for about 20 s before
    giving up (not configurable); vlbench then fails at once instead of retrying again.
    """
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{probe.getsockname()[1]}"
    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf-home"))
    command = [sys.executable, "-c", OFFLINE_SCRIPT, REPO, SHA, str(tmp_path / "cache")]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2, result.stdout + result.stderr
    for line in lines:
        assert line.startswith(f"dataset {REPO}@{SHA}: the hub at {endpoint} could not be reached")
        assert "Connection refused" in line and "file not found" not in line
        assert "source: {path: /that/dir}" in line
