"""`vlbench clean MODEL [BENCHMARK]`: drop one model's stored embeddings and what was made from
them, so that the same snakemake command makes them again.

Snakemake makes a missing file again only when a job that needs it has to run: deleting
`results/embeddings/<model>/<benchmark>/` (or its index, ranks and metric files too) leaves the
tables up to date, and the next run does nothing. This command removes the (model, benchmark)'s
embeddings, index, ranks and metric files, and the tables job's `metrics.csv`, so the next run
rewrites the tables, which need the metric files, which need the embeddings: it embeds (no
stored shard of what was removed is left to reuse), evaluates, and remakes everything after.
It removes nothing else: prepared data, the pixel cache (shared by every model; each entry is
checked on use) and other models' files stay. Run it with no snakemake running in the same
directory.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import TextIO

import jsonschema

from vlbench.config import load_schema
from vlbench.errors import VlbenchError
from vlbench.paths import EMBEDDINGS_DIR, INDEX, METRICS, RANKS

# The results folders that hold one (model, benchmark)'s files: results/<stage>/<model>/<benchmark>.
STAGES = tuple(Path(pattern).parts[1] for pattern in (EMBEDDINGS_DIR, INDEX, RANKS, METRICS))
# An output of the tables job: without it the next run rewrites the tables from the metric files.
TABLES_OUTPUT = Path("tables") / "metrics.csv"


def clean(
    model: str, benchmark: str | None, results: str | Path = "results", out: TextIO = sys.stdout
) -> int:
    """Remove the stage folders of a model (or of one of its benchmarks); return how many."""
    key = load_schema()["$defs"]["key"]  # the rule every model and benchmark key follows
    for name, value in (("MODEL", model), ("BENCHMARK", benchmark)):
        if value is not None and not jsonschema.Draft202012Validator(key).is_valid(value):
            raise VlbenchError(f"{name} {value!r}: not a model or benchmark key")
    folders = [Path(results, stage, model, *([benchmark] if benchmark else [])) for stage in STAGES]
    present = [folder for folder in folders if folder.exists()]
    if not present:
        what = f"{model}/{benchmark}" if benchmark else model
        raise VlbenchError(f"nothing of {what} under {results}/ ({', '.join(STAGES)})")
    for folder in present:
        shutil.rmtree(folder)
        print(f"removed {folder}", file=out)
    tables = Path(results) / TABLES_OUTPUT
    if tables.exists():
        tables.unlink()
        print(f"removed {tables} (the tables are written again from the metric files)", file=out)
    print("the same snakemake command now makes them again", file=out)
    return len(present)


def run_clean(model: str, benchmark: str | None, results: str = "results") -> int:
    """The command: 0, or 1 with a one-line error."""
    try:
        clean(model, benchmark, results)
    except VlbenchError as error:
        print(f"vlbench error: {error}", file=sys.stderr)
        return 1
    return 0
