"""Route a rule script's stderr and logging into its Snakemake log (kept free of heavy imports)."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from vlbench.atomic import is_no_space, no_space_error
from vlbench.errors import VlbenchError


@contextlib.contextmanager
def rule_log(log_path: str | Path) -> Iterator[logging.Logger]:
    """Send stderr (progress bars, warnings, tracebacks) and a logger to the rule's log file.

    For the body of a rule script, whose process ends with it: when the body succeeds, every
    object alive is frozen out of the garbage collector (`gc.freeze`), so that interpreter
    shutdown does not walk them all again (about 1 s after importing torch and open_clip, on
    every embedding job). The job's files are written and closed by then.
    """
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8", buffering=1) as handle:
        old_stderr = sys.stderr
        sys.stderr = handle
        logger = logging.getLogger("vlbench")
        log_handler = logging.StreamHandler(handle)
        log_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(log_handler)
        old_level, old_propagate = logger.level, logger.propagate
        logger.setLevel(logging.INFO)
        logger.propagate = False
        logger.info("pid %d", os.getpid())
        try:
            yield logger
        except Exception as error:
            # A full disk met outside an atomic writer (a library's own file) is one line too.
            if not isinstance(error, VlbenchError) and is_no_space(error):
                where = getattr(error, "filename", None) or "an output of this job"
                error = no_space_error(where, None, error)
            if not isinstance(error, VlbenchError):
                raise
            handle.write(f"ERROR: {error}\n")
            old_stderr.write(f"vlbench error: {error}\n")
            raise SystemExit(1) from None
        finally:
            logger.removeHandler(log_handler)
            logger.setLevel(old_level)
            logger.propagate = old_propagate
            sys.stderr = old_stderr
    gc.freeze()
