"""Whether a snakemake command line runs jobs or only plans (dry run, lint, DAG, report, ...).

Planning resolves unpinned hub downloads only for a run that will download them, so a dry run,
`--lint` or `--report` never asks the hub and never writes the lock file.
"""

from __future__ import annotations

from collections.abc import Iterable

# Snakemake options that plan without running jobs: such an invocation never asks the hub.
PLAN_ONLY_OPTIONS = (
    "--dry-run",
    "--dryrun",
    "--lint",
    "--dag",
    "--d3dag",
    "--rulegraph",
    "--filegraph",
    "--summary",
    "--detailed-summary",
    "--list-rules",
    "--list",
    "--list-target-rules",
    "--lt",
    "--list-changes",
    "--lc",
    "--report",
    "--unlock",
    "--cleanup-metadata",
    "--cm",
    "--touch",
    "--delete-all-output",
    "--delete-temp-output",
    "--archive",
    "--containerize",
    "--export-cwl",
    "--print-compilation",
    "--generate-unit-tests",
)
PLAN_ONLY_SHORT = set("nStDl")


def plans_only(argv: Iterable[str]) -> bool:
    """Whether a snakemake command line only plans (dry run, lint, DAG, report, ...)."""
    for arg in argv:
        option = arg.split("=", 1)[0]
        if option in PLAN_ONLY_OPTIONS or option.startswith("--list"):
            return True
        # short-flag clusters like -n, -np, -S (never a value such as -c4)
        short = arg.startswith("-") and not arg.startswith("--") and arg[1:].isalpha()
        if short and set(arg[1:]) & PLAN_ONLY_SHORT:
            return True
    return False
