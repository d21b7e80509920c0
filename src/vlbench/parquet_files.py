"""Read a whole parquet file (or some of its columns) without the dataset layer.

`pyarrow.parquet.read_table` goes through `pyarrow.dataset`, whose import pulls in pandas
(about 0.3 s per process); every file the workflow reads is one parquet file, which
`ParquetFile.read` reads the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def read_parquet(path: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """The table of one parquet file, all columns or `columns` (in that order)."""
    with pq.ParquetFile(path) as parquet:
        return parquet.read(columns=list(columns) if columns is not None else None)
