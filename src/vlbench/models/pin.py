"""Print the commit each unpinned hub download of a config points to now (needs the network).

Usage: python -m vlbench.models.pin config/biomedflickr.yaml [more configs]
Copy the printed shas into the config after checking them: a pin is a decision, not a default.
"""

from __future__ import annotations

import sys

import yaml

from vlbench.errors import VlbenchError
from vlbench.models import hub
from vlbench.models.dispatch import hub_pins


def main(paths: list[str]) -> int:
    """Print `models.<key>.<field>: <sha>  # repo` for every missing pin."""
    if not paths:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            config = yaml.safe_load(handle) or {}
        for key, spec in (config.get("models") or {}).items():
            for field, repo, repo_type in hub_pins(spec):
                if spec.get(field):
                    continue
                try:
                    sha = hub.current_commit(repo, repo_type)
                except Exception as exc:  # report and continue with the other repos
                    print(f"{path}: models.{key}.{field}: {repo}: {exc}", file=sys.stderr)
                    continue
                print(f"{path}: models.{key}.{field}: {sha}  # {repo_type} {repo} (main now)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except VlbenchError as error:
        print(f"vlbench error: {error}", file=sys.stderr)
        sys.exit(1)
