"""Writing an imported dataset folder: all at once, with its images linked or copied.

The folder is assembled in a hidden temporary folder beside DEST (`.DEST.<random>.partial`,
which the workflow's file fingerprints and a glance at the data folder both skip) and renamed
onto DEST only when every file is in place (vlbench.atomic.atomic_directory), so an import that
fails or is killed never leaves a DEST that looks finished.

Images are hard-linked when DEST is on the source's file system: no second copy of a 10 GB
release, and the bytes are the publisher's own. Where a link cannot be made (another file
system, a file system without hard links, a link-count limit) the file is copied instead;
`copy=True` always copies (for a DEST that must not share inodes with the download, e.g. when
the download will be edited or deleted in place).
"""

from __future__ import annotations

import contextlib
import csv
import errno
import hashlib
import io
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vlbench.atomic import atomic_directory
from vlbench.data.importers.biocap_files import order_like_biocap, same_as_biocap
from vlbench.errors import VlbenchError

# Errors of os.link that mean "cannot link here", answered by copying.
NO_LINK_ERRNOS = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EOPNOTSUPP, errno.ENOTSUP}


@dataclass
class ImportResult:
    """What an import wrote, for the command's summary line."""

    dest: Path
    images: int = 0
    linked: int = 0
    copied: int = 0
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        how = f"{self.linked} hard-linked, {self.copied} copied"
        return " ".join([f"wrote {self.dest}: {self.images} images ({how}).", *self.notes])


@dataclass
class Staging:
    """The temporary folder an import fills, with the counts of how images got there."""

    root: Path
    result: ImportResult
    copy: bool = False

    def place_image(self, source: Path, relative: str) -> None:
        """Hard-link (or copy) one publisher file to `relative` inside the new folder."""
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if not self.copy:
            try:
                os.link(source, target)
                self.result.linked += 1
                self.result.images += 1
                return
            except OSError as exc:
                if exc.errno not in NO_LINK_ERRNOS:
                    raise
        shutil.copyfile(source, target)
        self.result.copied += 1
        self.result.images += 1

    def write_bytes(self, relative: str, data: bytes) -> None:
        """Write one small file (an annotation CSV) into the new folder."""
        (self.root / relative).write_bytes(data)


def _refuse_existing(dest: Path, replace: bool) -> None:
    if replace or not dest.exists():
        return
    if dest.is_dir() and not any(dest.iterdir()):
        return  # an empty folder made beforehand is replaced as if it were not there
    kind = "folder" if dest.is_dir() else "file"
    raise VlbenchError(f"{dest}: the {kind} already exists; pass --replace to replace it")


@contextlib.contextmanager
def staging(dest: Path, replace: bool, copy: bool) -> Iterator[Staging]:
    """Yield a Staging whose folder becomes `dest` when the block ends without an error.

    An existing non-empty `dest` is an error unless `replace` is set; it is then swapped for
    the new folder only once that is complete.
    """
    dest = Path(dest)
    _refuse_existing(dest, replace)
    try:
        with atomic_directory(dest) as tmp:
            yield Staging(tmp, ImportResult(dest), copy)
    except OSError as exc:
        raise VlbenchError(f"{dest}: cannot write ({exc.strerror or exc}: {exc.filename})") from exc


def pandas_csv(header: Iterable[str], rows: Iterable[Iterable[object]]) -> bytes:
    """A CSV as pandas' `DataFrame.to_csv()` writes it (what BioCAP's metadata files are):
    a leading unnamed index column 0, 1, 2, ..., minimal quoting, '\\n' line ends, UTF-8."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["", *header])
    for number, row in enumerate(rows):
        writer.writerow([number, *row])
    return buffer.getvalue().encode("utf-8")


def sha256(data: bytes) -> str:
    """Hex sha256 of some bytes."""
    return hashlib.sha256(data).hexdigest()


def import_class_folders(
    read_rows: Callable[[Path], list[tuple[str, str, Path]]],
    listing: str,
    biocap_prefix: str,
    src: Path,
    dest: Path,
    *,
    metadata: Path | None = None,
    replace: bool = False,
    copy: bool = False,
) -> ImportResult:
    """DEST/metadata.csv (`filepath,class`, BioCAP's layout) and DEST/<filepath> per image.

    `read_rows(src)` gives (filepath, class, publisher file) from the publisher's `listing`
    file; with `metadata` (BioCAP's file) every row must match it and the rows take its order.
    The summary says whether metadata.csv is byte-identical to one of BioCAP's files under
    `biocap_prefix`.
    """
    rows = read_rows(Path(src))
    pairs = [(relative, label) for relative, label, _ in rows]
    if metadata is not None:
        pairs = order_like_biocap(pairs, Path(metadata), f"{src}/{listing}")
    files = {relative: file for relative, _, file in rows}
    data = pandas_csv(["filepath", "class"], pairs)
    with staging(Path(dest), replace, copy) as stage:
        for relative, _ in pairs:
            stage.place_image(files[relative], relative)
        stage.write_bytes("metadata.csv", data)
    stage.result.notes.append(same_as_biocap(sha256(data), biocap_prefix))
    return stage.result
