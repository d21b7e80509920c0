"""Print the commit each unpinned hub download of a config points to now (needs the network).

Usage: python -m vlbench.embedding.models.pin config/biomedflickr.yaml [more configs]
Copy the printed shas into the config after checking them: a pin is a decision, not a default.
`vlbench lock CONFIG` does the same for models and datasets and writes the config's lock file.
"""

from __future__ import annotations

import sys

from vlbench.data.sources.hub_access import current_commit, unreachable_reason
from vlbench.embedding.models.dispatch import hub_pins
from vlbench.errors import VlbenchError
from vlbench.yaml_files import read_yaml_mapping

PIN_OFFLINE_HINT = (
    "pinning asks the hub for its current commit, so run this where the hub can be reached; "
    "to run offline without pins, use local copies laid out like the hub repo "
    "('local-dir:/path' or a local checkpoint path)"
)


def _failure(exc: Exception) -> str:
    """One line on why a lookup failed."""
    reason = unreachable_reason(exc)
    if reason is not None:
        return f"{reason}; {PIN_OFFLINE_HINT}"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def main(paths: list[str]) -> int:
    """Print `models.<key>.<field>: <sha>  # repo` for every missing pin.

    Each failed lookup is one line on stderr; the exit code is 1 when any lookup failed.
    """
    if not paths:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    failures = 0
    for path in paths:
        config = read_yaml_mapping(path, "config file")
        models = config.get("models") or {}
        if not isinstance(models, dict):
            raise VlbenchError(f"{path}: 'models' must be a mapping of model keys to entries")
        for key, spec in models.items():
            if not isinstance(spec, dict):
                raise VlbenchError(f"{path}: models.{key} must be a mapping of model options")
            for field, repo, repo_type in hub_pins(spec):
                if spec.get(field):
                    continue
                try:
                    sha = current_commit(repo, repo_type)
                except Exception as exc:  # report and continue with the other repos
                    failures += 1
                    print(
                        f"{path}: models.{key}.{field}: {repo_type} {repo}: {_failure(exc)}",
                        file=sys.stderr,
                    )
                    continue
                print(f"{path}: models.{key}.{field}: {sha}  # {repo_type} {repo} (main now)")
    if failures:
        print(f"vlbench error: {failures} lookup(s) failed (listed above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except VlbenchError as error:
        print(f"vlbench error: {error}", file=sys.stderr)
        sys.exit(1)
