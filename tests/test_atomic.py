"""Atomic writes: modes under the process umask, a full disk as a one-line error."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from vlbench import atomic
from vlbench.atomic import (
    atomic_directory,
    atomic_path,
    current_umask,
    is_no_space,
    locked_partial,
    npy_bytes,
    reserve_space,
    reserved_npy_memmap,
    sweep_partials,
    write_text,
)
from vlbench.errors import VlbenchError


@pytest.fixture(params=[0o022, 0o027], ids=["umask022", "umask027"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_files_and_directories_get_the_umask_modes(umask: int, tmp_path: Path) -> None:
    write_text(tmp_path / "a.txt", "a\n")
    with atomic_path(tmp_path / "b.bin") as tmp:
        tmp.write_bytes(b"b")
    with atomic_directory(tmp_path / "c") as tmp:
        (tmp / "inner.txt").write_text("c\n")
    assert mode(tmp_path / "a.txt") == 0o666 & ~umask
    assert mode(tmp_path / "b.bin") == 0o666 & ~umask
    assert mode(tmp_path / "c") == 0o777 & ~umask
    assert mode(tmp_path / "c" / "inner.txt") == 0o666 & ~umask
    assert os.umask(umask) == umask  # reading the umask left it as it was


def test_umask_without_proc_is_read_and_restored(
    umask: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_proc(*_args: object) -> Path:
        raise OSError(errno.ENOENT, "no /proc here")

    monkeypatch.setattr(atomic, "Path", no_proc)
    assert current_umask() == umask
    assert os.umask(umask) == umask


def test_full_disk_in_an_atomic_write_is_one_line(tmp_path: Path) -> None:
    target = tmp_path / "out" / "matrix.npy"
    expected = 5_000_000
    with pytest.raises(VlbenchError) as caught, atomic_path(target, expected_bytes=expected) as tmp:
        tmp.write_bytes(b"x" * 10)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert str(caught.value) == f"no space left on device for {target} (needs about 5.0 MB)"
    assert [p.name for p in tmp_path.rglob("*")] == ["out"]


def test_full_disk_with_an_unknown_size_names_what_was_written(tmp_path: Path) -> None:
    target = tmp_path / "table.csv"
    with pytest.raises(VlbenchError) as caught, atomic_path(target) as tmp:
        tmp.write_bytes(b"x" * 3_000_000)
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
    assert str(caught.value) == f"disk quota exceeded for {target} (needs more than 3.0 MB)"
    assert list(tmp_path.iterdir()) == []


def test_full_disk_in_an_atomic_directory_is_one_line(tmp_path: Path) -> None:
    target = tmp_path / "bench"
    with pytest.raises(VlbenchError) as caught, atomic_directory(target) as tmp:
        (tmp / "part.bin").write_bytes(b"x" * 1000)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert str(caught.value) == f"no space left on device for {target} (needs more than 0.1 MB)"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("unsupported", [errno.EOPNOTSUPP, errno.EINVAL])
def test_reserve_space_writes_zeros_where_fallocate_is_unsupported(
    unsupported: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fallocate(fd: int, offset: int, length: int) -> None:
        raise OSError(unsupported, os.strerror(unsupported))

    monkeypatch.setattr(atomic.os, "posix_fallocate", no_fallocate)
    monkeypatch.setattr(atomic, "ZERO_FILL_CHUNK", 4096)
    path = tmp_path / "reserved"
    with open(path, "wb") as handle:
        handle.write(b"head")
        handle.flush()
        reserve_space(handle.fileno(), 10_000)
    data = path.read_bytes()
    assert len(data) == 10_000 and data[:4] == b"head" and not any(data[4:])
    assert path.stat().st_blocks * 512 >= 10_000  # written, not a sparse hole


def test_reserved_memmap_is_a_valid_npy_of_the_announced_size(tmp_path: Path) -> None:
    path = tmp_path / "a.npy"
    shape = (7, 5, 3)
    with open(path, "w+b") as handle:
        array = reserved_npy_memmap(handle, np.uint8, shape)
        array[:] = np.arange(105, dtype=np.uint8).reshape(shape)
        array.flush()
        del array
    assert path.stat().st_size == npy_bytes(np.uint8, shape)
    assert np.array_equal(np.load(path), np.arange(105, dtype=np.uint8).reshape(shape))


# Every kind of atomic write the workflow's jobs make, each killed (SIGKILL of its process
# group, as VLBENCH_CRASH_BEFORE does inside a workflow) just before its rename.
CRASH_SITES = {
    "text (tables, JSON, HTML)": "from vlbench.atomic import write_text\nwrite_text(target, 'new')",
    "file (parquet, CSV, faiss index)": (
        "from vlbench.atomic import atomic_path\n"
        "with atomic_path(target) as tmp:\n    tmp.write_bytes(b'new')"
    ),
    "directory (synthetic source)": (
        "from vlbench.atomic import atomic_directory\n"
        "with atomic_directory(target) as tmp:\n    (tmp / 'file').write_text('new')"
    ),
    "embedding shard (ids, then matrix)": (
        "import numpy as np\nfrom vlbench.embedding.matrix_files import save_embeddings\n"
        "save_embeddings(['a'], np.ones((1, 4), np.float32), target, target.with_suffix('.ids'))"
    ),
    "gathered matrix (reserved memory map)": (
        "import numpy as np\n"
        "from vlbench.embedding.shard_files import gather_shards\n"
        "from vlbench.embedding.matrix_files import MatrixFiles, save_embeddings\n"
        "shard = MatrixFiles.at(target.parent / 'shard')\n"
        "save_embeddings(['a'], np.ones((1, 4), np.float32), shard.embeddings, shard.ids)\n"
        "out = MatrixFiles(target, target.with_suffix('.ids'), target.with_suffix('.json'))\n"
        "gather_shards([shard], [{'rows': [0, 1]}], out)"
    ),
}


def write_in_own_group(code: str, target: Path, crash: bool) -> int:
    """Run one write in a child process of its own group; its exit code (-9: killed)."""
    env = {key: value for key, value in os.environ.items() if key != atomic.CRASH_ENV}
    if crash:
        env[atomic.CRASH_ENV] = str(target.resolve())
    script = f"from pathlib import Path\ntarget = Path({str(target)!r})\n{code}\n"
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, start_new_session=True, capture_output=True
    )
    assert result.returncode in (0, -9), result.stderr.decode()[-2000:]
    return result.returncode


@pytest.mark.parametrize("site", list(CRASH_SITES))
def test_a_write_killed_before_its_rename_leaves_nothing_that_looks_finished(
    site: str, tmp_path: Path
) -> None:
    code = CRASH_SITES[site]
    target = tmp_path / ("out" if "directory" in site else "out.npy")
    assert write_in_own_group(code, target, crash=True) == -9
    assert not target.exists()
    partials = list(tmp_path.rglob("*.partial"))
    assert all(path.name.startswith(".") for path in partials), partials
    assert write_in_own_group(code, target, crash=False) == 0
    assert target.exists()
    assert list(tmp_path.rglob("*.partial")) == []  # the next write swept the killed one's


@pytest.mark.parametrize("directory", [False, True], ids=["file", "directory"])
def test_a_sweep_removes_unheld_partials_and_keeps_a_live_writers(
    directory: bool, tmp_path: Path
) -> None:
    target = tmp_path / "out.csv"
    fd, live = locked_partial(target, directory=directory)
    try:
        stale = tmp_path / ".out.csv.killed.partial"  # a writer killed right after creating it
        stale.mkdir() if directory else stale.write_bytes(b"")
        other = tmp_path / ".other.csv.killed.partial"  # another output's: not this sweep's
        other.write_bytes(b"")
        assert sweep_partials(target) == [stale]
        assert live.exists() and other.exists() and not stale.exists()
    finally:
        os.close(fd)
    assert sweep_partials(target) == [live]  # its writer let go: now it is stale too


def test_a_library_error_for_a_full_disk_is_one_line(tmp_path: Path) -> None:
    import polars as pl

    # What polars 1.x raised for a parquet write onto a full disk (not an OSError).
    full = pl.exceptions.ComputeError(
        "parquet: File out of specification: underlying IO error: No space left on device "
        "(os error 28)"
    )
    assert is_no_space(full) and not is_no_space(pl.exceptions.ComputeError("bad schema"))
    target = tmp_path / "outcomes.parquet"
    with pytest.raises(VlbenchError) as caught, atomic_path(target) as tmp:
        tmp.write_bytes(b"x" * 2_000_000)
        raise full
    assert str(caught.value) == f"no space left on device for {target} (needs more than 2.0 MB)"
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_outside_an_atomic_writer_is_one_line_in_a_rule_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from vlbench.rule_log import rule_log

    log, figure = tmp_path / "job.log", tmp_path / "bars.png"
    with pytest.raises(SystemExit), rule_log(log):  # as a library writing its own file fails
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(figure))
    expected = f"no space left on device for {figure}"
    assert f"vlbench error: {expected}\n" in capsys.readouterr().err
    assert log.read_text().splitlines()[-1] == f"ERROR: {expected}"
