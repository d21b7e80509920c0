"""Installed versions of the libraries behind a result (the one collector provenance uses)."""

from __future__ import annotations

import platform
from collections.abc import Iterable
from importlib import metadata


def package_versions(names: Iterable[str]) -> dict[str, str | None]:
    """Python's version and each named distribution's (None when it is not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions
