"""The one exception type vlbench raises for bad input, with a one-line cause."""

from __future__ import annotations


class VlbenchError(Exception):
    """A user-facing error: the message names the file, row or key at fault in one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))
