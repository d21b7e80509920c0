"""Real small file systems for full-disk tests: a tmpfs mounted on a folder (needs root, as on
the CI machine; elsewhere the test that asks for one is skipped, saying why)."""

from __future__ import annotations

import contextlib
import errno
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

FILLER = ".filler"


@contextlib.contextmanager
def small_disk(mount: Path, size: str = "128k", full: bool = False) -> Iterator[Path]:
    """A tmpfs of `size` on the folder `mount` (made if missing) while the block runs; `full`:
    filled to the last block by one file, FILLER, so every write that needs a block fails."""
    mount.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None:
        pytest.skip("no mount command to make a small file system")
    command = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {result.stderr.strip()}")
    try:
        if full:
            fill(mount / FILLER)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def fill(path: Path) -> None:
    """Write zeros to `path` until its file system has no block left."""
    with open(path, "wb", buffering=0) as handle:
        for chunk in (4096, 512, 1):
            try:
                while True:
                    handle.write(b"\0" * chunk)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise


def files_on(mount: Path) -> list[str]:
    """The files on a small disk besides the filler (folders do not count)."""
    return sorted(
        str(path.relative_to(mount))
        for path in mount.rglob("*")
        if path.is_file() and path.name != FILLER
    )
