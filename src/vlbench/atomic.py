"""Atomic writes: a file or directory appears under its final name only once it is complete.

Outputs get the modes any other new file gets under the process umask (0644 and 0755 under
umask 022), not the private 0600/0700 of `tempfile`. A full disk (or quota) while writing is a
one-line `VlbenchError` naming the output and about how much room it needs, whichever library
hit it (an OSError, or a polars, pyarrow or faiss error that says so).

Until its rename, an output is a hidden partial beside it, `.<name>.<random>.partial`, locked
(`flock`) by its writer. A killed writer's lock dies with it, so every writer first removes the
partials of its output that nobody holds: the next run sweeps what a killed one left, in every
stage, and never a partial a live writer still fills.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import fnmatch
import functools
import glob
import io
import math
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from vlbench.errors import VlbenchError

if TYPE_CHECKING:
    import numpy as np

# Fault injection for tests: set VLBENCH_CRASH_BEFORE to a glob pattern and the first atomic
# write whose final path matches kills its process group (Snakemake and every running job) with
# SIGKILL just before the temporary file would be renamed into place. Unset, this costs one
# environment lookup.
CRASH_ENV = "VLBENCH_CRASH_BEFORE"


def crash_point(path: str) -> None:
    """SIGKILL the process group if `path` (made absolute) matches VLBENCH_CRASH_BEFORE."""
    pattern = os.environ.get(CRASH_ENV)
    if pattern and fnmatch.fnmatch(os.path.abspath(path), pattern):
        os.killpg(os.getpgrp(), signal.SIGKILL)


FILE_MODE = 0o666
DIRECTORY_MODE = 0o777
NO_SPACE_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
ZERO_FILL_CHUNK = 16 * 2**20

_umask_lock = threading.Lock()


def current_umask() -> int:
    """The process umask, read without changing it where Linux shows it in /proc."""
    with contextlib.suppress(OSError):
        status = Path("/proc/self/status").read_text(encoding="ascii", errors="replace")
        found = re.search(r"^Umask:\s*([0-7]+)\s*$", status, re.MULTILINE)
        if found:
            return int(found.group(1), 8)
    with _umask_lock:
        mask = os.umask(0)
        os.umask(mask)
    return mask


def apply_umask(path: str | Path, directory: bool = False) -> None:
    """Give a `tempfile`-made file or directory the mode a plain open()/mkdir() would have."""
    base = DIRECTORY_MODE if directory else FILE_MODE
    os.chmod(path, base & ~current_umask())


NO_SPACE_TEXTS = ("No space left on device", "Disk quota exceeded")


def is_no_space(error: BaseException) -> bool:
    """Whether an error means a full disk or quota: an OSError's errno, or the words of the
    system's message in a library's own error (polars raises ComputeError for a parquet write,
    pyarrow and faiss write the errno into their text)."""
    if isinstance(error, OSError) and error.errno in NO_SPACE_ERRNOS:
        return True
    text = str(error)
    return any(words in text for words in NO_SPACE_TEXTS)


def _is_quota(error: BaseException | None) -> bool:
    if error is None:
        return False
    return getattr(error, "errno", None) == errno.EDQUOT or NO_SPACE_TEXTS[1] in str(error)


def _megabytes(nbytes: int) -> str:
    megabytes = nbytes / 1e6
    return f"{megabytes:.0f}" if megabytes >= 10 else f"{max(megabytes, 0.1):.1f}"


def no_space_error(
    path: str | Path,
    nbytes: int | None,
    error: BaseException | None = None,
    at_least: bool = False,
) -> VlbenchError:
    """The one-line error for a write of about `nbytes` to `path` that found no room
    (`nbytes` None: the size is not known)."""
    cause = "disk quota exceeded" if _is_quota(error) else "no space left on device"
    if nbytes is None:
        return VlbenchError(f"{cause} for {path}")
    amount = "more than" if at_least else "about"
    return VlbenchError(f"{cause} for {path} (needs {amount} {_megabytes(nbytes)} MB)")


def reserve_space(fd: int, size: int) -> None:
    """Allocate `size` bytes of the open file `fd` on disk now, so a full disk fails here.

    Uses posix_fallocate; where the file system does not support it, writes zeros over the
    part of the file not yet written. Raises OSError (ENOSPC) when the room is not there.
    """
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is not None:
        try:
            fallocate(fd, 0, size)
            return
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
    offset = os.fstat(fd).st_size
    zeros = bytes(min(ZERO_FILL_CHUNK, max(size - offset, 0)))
    while offset < size:
        chunk = memoryview(zeros)[: size - offset]
        offset += os.pwrite(fd, chunk, offset)
    os.fsync(fd)


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()


def npy_bytes(dtype: Any, shape: Sequence[int]) -> int:
    """The size of an .npy file holding a C-order array of `dtype` and `shape`."""
    import numpy as np

    dtype, shape = np.dtype(dtype), tuple(int(size) for size in shape)
    return len(_npy_header(dtype, shape)) + math.prod(shape) * dtype.itemsize


def reserved_npy_file(handle: IO[bytes], dtype: Any, shape: Sequence[int]) -> int:
    """Write an .npy header to the open file `handle` and reserve the array's room on disk;
    return the offset of the array's data. A full disk is an OSError (ENOSPC) here, before
    any of the data is written."""
    import numpy as np

    dtype, shape = np.dtype(dtype), tuple(int(size) for size in shape)
    header = _npy_header(dtype, shape)
    handle.seek(0)
    handle.truncate()
    handle.write(header)
    handle.flush()
    reserve_space(handle.fileno(), npy_bytes(dtype, shape))
    return len(header)


def reserved_npy_memmap(handle: IO[bytes], dtype: Any, shape: Sequence[int]) -> np.memmap:
    """`reserved_npy_file`, then the array mapped for writing.

    A sparse file mapped for writing dies with SIGBUS when the disk fills up; with the room
    reserved first, a full disk is an OSError (ENOSPC) before anything is mapped.
    """
    import numpy as np

    offset = reserved_npy_file(handle, dtype, shape)
    return np.memmap(handle, dtype=dtype, mode="r+", shape=tuple(shape), offset=offset)


def write_at(fd: int, data: memoryview, offset: int) -> None:
    """Write all of `data` to the open file `fd` at `offset` (pwrite, repeated while short)."""
    while data:
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written


def _written_bytes(path: Path) -> int:
    with contextlib.suppress(OSError):
        if path.is_dir():
            return sum(item.stat().st_size for item in path.rglob("*") if item.is_file())
        return path.stat().st_size
    return 0


def _file_system_full(path: Path) -> bool:
    """Whether the file system holding `path` has no block left for an ordinary user: what a
    failed write means when the writer's error does not say (torch.save's "file write failed",
    an `iostream error`)."""
    with contextlib.suppress(OSError):
        return os.statvfs(path.parent).f_bavail == 0
    return False


@contextlib.contextmanager
def _no_space_as_error(path: Path, tmp: Path | None, expected_bytes: int | None) -> Iterator[None]:
    try:
        yield
    except VlbenchError:
        raise
    except Exception as exc:
        if not (is_no_space(exc) or _file_system_full(path)):
            raise
        written = _written_bytes(tmp) if tmp is not None else 0
        if expected_bytes:
            raise no_space_error(path, max(expected_bytes, written), exc) from exc
        raise no_space_error(path, written, exc, at_least=True) from exc


def try_lock(fd: int) -> bool | None:
    """Lock `fd` exclusively without waiting: True if locked, False if held, None if unknown."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return None  # no locks on this file system: cannot tell a live writer from a dead one
    return True


def same_file(fd: int, path: Path) -> bool:
    """Whether the open `fd` is still the file or folder at `path` (not removed or replaced)."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except OSError:
        return False


def sweep_partials(path: str | Path) -> list[Path]:
    """Remove the partial files and folders of output `path` that no live writer holds.

    Every writer holds an exclusive lock on its partial while it fills it; the lock dies with
    its process, so a partial nobody holds is what a killed or failed writer left. Returns
    the partials removed.
    """
    path = Path(path)
    removed = []
    for partial in sorted(path.parent.glob(f".{glob.escape(path.name)}.*.partial")):
        try:
            fd = os.open(partial, os.O_RDONLY)
        except OSError:
            continue
        try:
            if try_lock(fd) and same_file(fd, partial):
                if partial.is_dir() and not partial.is_symlink():
                    shutil.rmtree(partial, ignore_errors=True)
                else:
                    partial.unlink(missing_ok=True)
                removed.append(partial)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def locked_partial(path: str | Path, directory: bool = False) -> tuple[int, Path]:
    """A fresh partial file (or folder) beside `path`, locked by this process: (fd, partial).

    Stale partials of `path` are swept first. The caller closes `fd` when done (which lets
    go of the lock). A partial that a concurrent sweep removed between its creation and its
    lock is made again.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_partials(path)
    while True:
        if directory:
            name = tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
            fd = os.open(name, os.O_RDONLY)
        else:
            fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        if same_file(fd, Path(name)):
            return fd, Path(name)
        os.close(fd)


# sync_file_range(2)'s flag that starts writing a range back without waiting for it (Linux).
SYNC_FILE_RANGE_WRITE = 2


@functools.cache
def _sync_file_range() -> Any:
    """libc's sync_file_range, or None where there is none (not Linux)."""
    function = getattr(ctypes.CDLL(None, use_errno=True), "sync_file_range", None)
    if function is not None:
        function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    return function


def start_writeback(path: str | Path) -> None:
    """Start writing the file's dirty pages to disk, without waiting for them.

    A large output (the canonical images file, hundreds of MB) calls this as it goes, so its
    bytes reach the disk while the writer still works, and the fsync before its rename waits
    only for the last part (it would otherwise wait for the whole file at the end). The pages
    stay in the page cache for the next job. Does nothing where the call is missing.
    """
    function = _sync_file_range()
    if function is None:
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        function(fd, 0, 0, SYNC_FILE_RANGE_WRITE)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | Path, expected_bytes: int | None = None) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds.

    `expected_bytes`, when known, is the size the error names if the disk fills up.
    """
    path = Path(path)
    with _no_space_as_error(path, None, expected_bytes):
        fd, tmp = locked_partial(path)
    try:
        apply_umask(tmp)
        with _no_space_as_error(path, tmp, expected_bytes):
            yield tmp
            with open(tmp, "rb") as written:
                os.fsync(written.fileno())
        crash_point(str(path))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        os.close(fd)


@contextlib.contextmanager
def atomic_directory(path: str | Path, expected_bytes: int | None = None) -> Iterator[Path]:
    """Yield a fresh temporary directory beside `path`; swap it into place on success."""
    path = Path(path)
    with _no_space_as_error(path, None, expected_bytes):
        fd, tmp = locked_partial(path, directory=True)
    try:
        apply_umask(tmp, directory=True)
        with _no_space_as_error(path, tmp, expected_bytes):
            yield tmp
        crash_point(str(path))
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
        os.close(fd)


def write_text(path: str | Path, text: str) -> None:
    """Atomically write a text file."""
    data = text.encode("utf-8")
    with atomic_path(path, expected_bytes=len(data)) as tmp:
        tmp.write_bytes(data)
