"""Pin on first use: lock files, planning with a lock, strict mode and `vlbench lock`."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from workflow_helpers import validate, write_config

from vlbench.cli import main as cli_main
from vlbench.errors import VlbenchError
from vlbench.planning import invocation, lock_command, pinning
from vlbench.planning.lockfile import Pin, lock_path, read_lock, write_lock

A, B, C = "a" * 40, "b" * 40, "c" * 40


def hub_config(**top: Any) -> dict[str, Any]:
    """Two unpinned hub models (one an open_clip tag), one pinned, two benchmarks of one repo."""
    source = {"repo": "org/data", "format": "imagefolder_csv", "annotations": "x.csv"}
    return {
        "models": {
            "hub": {"name": "hf-hub:org/model"},
            "tag": {"name": "ViT-L-14", "pretrained": "laion2b_s32b_b82k"},
            "pinned": {"name": "hf-hub:org/pinned", "revision": A},
        },
        "benchmarks": {
            "one": {"protocol": "zeroshot", "source": {**source, "subset": "one"}},
            "two": {"protocol": "zeroshot", "source": {**source, "revision": "UNPINNED"}},
        },
        **top,
    }


class Hub:
    """Answers every branch lookup with one commit and records what was asked."""

    def __init__(self, commit: str = B) -> None:
        self.commit, self.asked = commit, []

    def __call__(self, repo: str, repo_type: str, branch: str) -> str:
        self.asked.append((repo_type, repo, branch))
        return self.commit


def test_lock_path_sits_beside_the_config() -> None:
    assert lock_path("config/biocap.yaml") == Path("config/biocap.lock")
    assert lock_path("x/mine.yml") == Path("x/mine.lock")


def test_hub_uses_list_every_download_and_share_a_repository() -> None:
    uses = pinning.hub_uses(validate(hub_config()))
    assert [(u.where, u.key, u.configured) for u in uses] == [
        ("models.hub.revision", "model org/model", None),
        ("models.tag.revision", "model laion/CLIP-ViT-L-14-laion2B-s32B-b82K", None),
        ("models.pinned.revision", "model org/pinned", A),
        ("benchmarks.one.source.revision", "dataset org/data", None),
        ("benchmarks.two.source.revision", "dataset org/data", None),
    ]


def test_a_real_run_resolves_once_per_repository_writes_the_lock_and_plans_the_commit(
    tmp_path: Path,
) -> None:
    lock, hub, config = tmp_path / "c.lock", Hub(), validate(hub_config())
    planned, info, warnings = pinning.plan_pins(config, lock, "c.yaml", resolve=True, ask=hub)
    assert warnings == []
    assert sorted(hub.asked) == [
        ("dataset", "org/data", "main"),
        ("model", "laion/CLIP-ViT-L-14-laion2B-s32B-b82K", "main"),
        ("model", "org/model", "main"),
    ]
    assert planned["models"]["hub"]["revision"] == B
    assert planned["models"]["tag"]["revision"] == B
    assert planned["models"]["pinned"]["revision"] == A  # the config wins
    assert {spec["source"]["revision"] for spec in planned["benchmarks"].values()} == {B}
    pins = read_lock(lock)
    laion = "model laion/CLIP-ViT-L-14-laion2B-s32B-b82K"
    assert set(pins) == {"model org/model", laion, "dataset org/data"}
    assert all(
        pin.commit == B and pin.branch == "main" and pin.resolved_at for pin in pins.values()
    )
    assert any(line.startswith("pinned dataset org/data to " + B) for line in info)
    assert len(info) == 3
    assert "models.hub.revision: model org/model: locked (bbbbbbbbbbbb)" in pinning.summary_lines(
        pinning.hub_uses(config), pins
    )
    assert "# vlbench lock file of c.yaml" in lock.read_text()


def test_later_runs_read_the_lock_and_never_move(tmp_path: Path) -> None:
    lock = tmp_path / "c.lock"
    pinning.plan_pins(validate(hub_config()), lock, "c.yaml", resolve=True, ask=Hub(B))
    before = lock.read_text()
    moved = Hub(C)  # the branches moved on
    planned, _, _ = pinning.plan_pins(validate(hub_config()), lock, "c.yaml", True, ask=moved)
    assert moved.asked == [] and lock.read_text() == before
    assert planned["models"]["hub"]["revision"] == B


def test_a_dry_run_reads_the_lock_but_never_asks_the_hub(tmp_path: Path) -> None:
    lock, hub = tmp_path / "c.lock", Hub()
    planned, info, warnings = pinning.plan_pins(
        validate(hub_config()), lock, "c.yaml", resolve=False, ask=hub
    )
    assert hub.asked == [] and not lock.exists() and warnings == [] and info == []
    assert "revision" not in planned["models"]["hub"]
    lines = pinning.summary_lines(pinning.hub_uses(planned), {})
    assert "models.hub.revision: model org/model: will pin on first use (-)" in lines
    assert "models.pinned.revision: model org/pinned: pinned (aaaaaaaaaaaa)" in lines


class Gone(Exception):
    """A hub answer that retrying cannot change (HTTP 404)."""

    response = type("Response", (), {"status_code": 404})()


def test_a_failed_lookup_warns_and_keeps_the_others(tmp_path: Path) -> None:
    def ask(repo: str, repo_type: str, branch: str) -> str:
        if repo == "org/model":
            raise Gone("gone")
        return B

    lock = tmp_path / "c.lock"
    planned, _, warnings = pinning.plan_pins(validate(hub_config()), lock, "c.yaml", True, ask)
    assert warnings == [
        "models.hub.revision: model org/model: cannot pin: HTTP 404 (gone); its jobs will fail "
        "until it is pinned"
    ]
    assert "revision" not in planned["models"]["hub"]
    assert "model org/model" not in read_lock(lock) and "dataset org/data" in read_lock(lock)


def test_an_unreachable_hub_is_asked_once(tmp_path: Path) -> None:
    asked = []

    def ask(repo: str, repo_type: str, branch: str) -> str:
        asked.append(repo)
        raise ConnectionRefusedError(111, "Connection refused")

    _, _, warnings = pinning.plan_pins(validate(hub_config()), tmp_path / "c.lock", "c", True, ask)
    assert asked == ["org/model"] and len(warnings) == 3
    assert all("cannot pin: the hub at " in line for line in warnings)
    assert all("could not be reached" in line for line in warnings)
    assert not (tmp_path / "c.lock").exists()


def test_server_errors_are_retried_then_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pinning, "RESOLVE_FIRST_DELAY_S", 0.0)
    outcomes: list[Any] = [RuntimeError("HTTP 500"), A]

    def ask(repo: str, repo_type: str, branch: str) -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert pinning.resolve_commit("org/x", "model", ask=ask) == A
    with pytest.raises(VlbenchError, match=r"^model org/x: cannot pin after 3 attempts"):
        pinning.resolve_commit("org/x", "model", ask=lambda *a: (_ for _ in ()).throw(OSError()))


def test_strict_mode_refuses_anything_unpinned_and_accepts_the_lock(tmp_path: Path) -> None:
    lock = tmp_path / "c.lock"
    config = validate(hub_config(pins="strict"))
    with pytest.raises(VlbenchError, match=r"^pins: strict refuses 4 unpinned") as error:
        pinning.plan_pins(config, lock, "c.yaml", resolve=True, ask=Hub())
    assert "models.hub.revision (model org/model)" in str(error.value)
    assert not lock.exists()
    pins = {use.key: Pin(C) for use in pinning.hub_uses(config) if not use.configured}
    write_lock(lock, pins, "c.yaml")
    planned, _, _ = pinning.plan_pins(config, lock, "c.yaml", resolve=True, ask=Hub())
    assert planned["models"]["hub"]["revision"] == C


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pins: {}\n", "not a vlbench lock file"),
        ("version: 1\npins: [1]\n", "'pins' must be a mapping"),
        ("version: 1\npins:\n  model a/b: {commit: main}\n", r"pins.model a/b.commit must be"),
        ("version: 1\npins:\n  model a/b: {}\n", r"pins.model a/b must be a mapping with"),
        ("version: 1\nversion: 1\n", "is given twice"),
    ],
)
def test_a_bad_lock_file_is_one_line_naming_it(tmp_path: Path, text: str, message: str) -> None:
    lock = tmp_path / "c.lock"
    lock.write_text(text)
    with pytest.raises(VlbenchError, match=message) as error:
        read_lock(lock)
    assert str(error.value).startswith(str(lock)) and "\n" not in str(error.value)


def snakemake_workflow(executor: str | None, dryrun: bool = False, main: bool = True):
    """The attributes `executes_jobs` reads of Snakemake's `workflow` object."""
    return SimpleNamespace(
        is_main_process=main,
        executor_plugin=None if executor is None else SimpleNamespace(name=executor),
        dryrun=dryrun,
        touch=executor == "touch",
    )


@pytest.mark.parametrize(
    ("workflow", "executes"),
    [
        (snakemake_workflow("local"), True),
        (snakemake_workflow("slurm"), True),
        (snakemake_workflow("dryrun", dryrun=True), False),
        (snakemake_workflow("touch"), False),
        (snakemake_workflow(None), False),  # --lint, --report, --dag, --summary, ...
        (snakemake_workflow("slurm-jobstep", main=False), False),  # a job on a cluster node
    ],
)
def test_only_a_main_process_with_a_real_executor_executes_jobs(workflow, executes: bool) -> None:
    assert invocation.executes_jobs(workflow) is executes


def test_first_use_pins_resolve_once_into_the_planned_config(tmp_path: Path) -> None:
    config = validate(hub_config())
    lock = tmp_path / "c.lock"
    planned, _, _ = pinning.plan_pins(config, lock, "c.yaml", resolve=False)
    assert not lock.exists()
    first_use = pinning.FirstUsePins(config, lock, "c.yaml")
    assert first_use.pending
    info, warnings = first_use.resolve_into(planned, ask=Hub(B))
    assert warnings == [] and len(info) == 3 and not first_use.pending
    assert planned["models"]["hub"]["revision"] == B
    assert planned["benchmarks"]["one"]["source"]["revision"] == B
    assert first_use.resolve_into(planned, ask=Hub(C)) == ([], [])  # once only
    assert {pin.commit for pin in read_lock(lock).values()} == {B}
    assert not pinning.FirstUsePins(config, lock, "c.yaml").pending


def test_vlbench_lock_writes_every_pin_then_check_and_update(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path, hub_config(), "mine.yaml")
    out, err = io.StringIO(), io.StringIO()
    assert lock_command.lock_config(path, check=True, out=out, err=err) == 1
    assert "models.hub.revision: model org/model is pinned neither" in err.getvalue()
    assert lock_command.lock_config(path, ask=Hub(B), out=io.StringIO()) == 0
    assert {pin.commit for pin in read_lock(tmp_path / "mine.lock").values()} == {B}
    assert lock_command.lock_config(path, check=True, out=io.StringIO()) == 0
    assert lock_command.lock_config(path, ask=Hub(C), out=io.StringIO()) == 0  # no move
    assert {pin.commit for pin in read_lock(tmp_path / "mine.lock").values()} == {B}
    assert lock_command.lock_config(path, update=True, ask=Hub(C), out=io.StringIO()) == 0
    assert {pin.commit for pin in read_lock(tmp_path / "mine.lock").values()} == {C}
    # through the command line, with the lookup replaced
    monkeypatch.setattr(pinning, "current_commit", Hub(A))
    assert cli_main(["lock", "--update", str(path)]) == 0
    assert {pin.commit for pin in read_lock(tmp_path / "mine.lock").values()} == {A}
    assert yaml.safe_load((tmp_path / "mine.lock").read_text())["version"] == 1


def test_vlbench_lock_drops_entries_the_config_no_longer_reads(tmp_path: Path) -> None:
    """A removed model and a repository now pinned in the config leave the lock; `--check`
    fails while they are still there, and a real run's planning keeps them (it only adds)."""
    config = hub_config()
    path = write_config(tmp_path, config, "mine.yaml")
    assert lock_command.lock_config(path, ask=Hub(B), out=io.StringIO()) == 0
    lock = tmp_path / "mine.lock"
    before = {"model org/model", "model laion/CLIP-ViT-L-14-laion2B-s32B-b82K", "dataset org/data"}
    assert set(read_lock(lock)) == before
    del config["models"]["hub"]
    config["benchmarks"]["two"]["source"]["revision"] = C
    config["benchmarks"]["one"]["source"]["revision"] = C
    write_config(tmp_path, config, "mine.yaml")
    pinning.plan_pins(validate(config), lock, "mine.yaml", resolve=True, ask=Hub(A))
    assert set(read_lock(lock)) == before
    err = io.StringIO()
    assert lock_command.lock_config(path, check=True, out=io.StringIO(), err=err) == 1
    assert "model org/model is read by no unpinned download" in err.getvalue()
    out = io.StringIO()
    assert lock_command.lock_config(path, ask=Hub(A), out=out) == 0
    assert "dropped dataset org/data" in out.getvalue()
    assert set(read_lock(lock)) == before - {"model org/model", "dataset org/data"}
    assert lock_command.lock_config(path, check=True, out=io.StringIO()) == 0


def test_vlbench_lock_says_when_there_is_nothing_to_lock(tmp_path: Path) -> None:
    offline = {"models": {"tiny": {"name": "hf-hub:org/pinned", "revision": A}}}
    offline["benchmarks"] = {"demo": {"protocol": "paired", "source": {"synthetic": {"pairs": 4}}}}
    path = write_config(tmp_path, offline, "offline.yaml")
    out = io.StringIO()
    assert lock_command.lock_config(path, ask=Hub(B), out=out) == 0
    assert out.getvalue().splitlines()[-1].startswith("nothing to lock: every hub download is")
    assert not (tmp_path / "offline.lock").exists()
    del offline["models"]["tiny"]["revision"]
    offline["models"]["tiny"] = {"name": "RN50-quickgelu", "pretrained": "yfcc15m"}  # a URL
    write_config(tmp_path, offline, "offline.yaml")
    out = io.StringIO()
    assert lock_command.lock_config(path, ask=Hub(B), out=out) == 0
    assert out.getvalue() == "nothing to lock: offline.yaml downloads nothing from the hub\n"
    path = write_config(tmp_path, hub_config(), "mine.yaml")
    assert lock_command.lock_config(path, ask=Hub(B), out=io.StringIO()) == 0
    out = io.StringIO()
    assert lock_command.lock_config(path, ask=Hub(C), out=out) == 0
    lock = tmp_path / "mine.lock"
    assert out.getvalue().splitlines()[-1] == (
        f"nothing to lock: every hub download is already pinned in mine.yaml or in {lock}"
    )


def test_vlbench_lock_names_a_bad_config_in_one_line(tmp_path: Path, capsys) -> None:
    path = write_config(tmp_path, {"models": {}}, "bad.yaml")
    assert cli_main(["lock", str(path)]) == 1
    assert capsys.readouterr().err.startswith(f"vlbench error: {path}: missing key")


def test_vlbench_lock_through_the_real_client(tmp_path: Path, loopback_hub) -> None:
    """Branch lookups over HTTP: a 500 is retried, an unknown repository is one line."""
    model_sha = loopback_hub.commit("model", "org/model", {"README.md": b"model"})
    data_sha = loopback_hub.commit("dataset", "org/data", {"x.csv": b"file_name\n"})
    loopback_hub.fail("/api/models/org/model/revision/main", status=500)
    config = hub_config()
    del config["models"]["tag"]
    path = write_config(tmp_path, config, "mine.yaml")
    out, err = io.StringIO(), io.StringIO()
    assert lock_command.lock_config(path, out=out, err=err) == 0, err.getvalue()
    pins = read_lock(tmp_path / "mine.lock")
    assert pins["model org/model"].commit == model_sha
    assert pins["dataset org/data"].commit == data_sha
    assert loopback_hub.served("GET", "/api/models/org/model/revision/main") == [500, 200]
    config["models"]["gone"] = {"name": "hf-hub:org/gone"}
    path = write_config(tmp_path, config, "mine.yaml")
    err = io.StringIO()
    assert lock_command.lock_config(path, out=io.StringIO(), err=err) == 1
    assert err.getvalue() == (
        "vlbench error: models.gone.revision: model org/gone: cannot pin: repository not found "
        "(or not public)\n"
    )


def test_a_hub_that_is_down_is_named_as_unreachable(tmp_path: Path, loopback_hub) -> None:
    loopback_hub.stop()
    config = {
        "models": {"m": {"name": "hf-hub:org/model"}},
        "benchmarks": hub_config()["benchmarks"],
    }
    err = io.StringIO()
    assert lock_command.lock_config(write_config(tmp_path, config), out=io.StringIO(), err=err) == 1
    lines = err.getvalue().splitlines()
    assert len(lines) == 2
    for line in lines:
        assert f"cannot pin: the hub at {loopback_hub.endpoint} could not be reached" in line
        assert "not found" not in line
