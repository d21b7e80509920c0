"""Decide whether encoded image bytes decode, cheaply (reduced-size JPEG draft when possible)."""

from __future__ import annotations

import io

from PIL import Image

DRAFT_SIZE = (64, 64)


def decode_error(data: bytes) -> str | None:
    """None when `data` decodes as an image, else a short reason."""
    if not data:
        return "no bytes"
    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.format == "JPEG":
                image.draft("RGB", DRAFT_SIZE)
            image.load()
    except Exception as exc:  # PIL raises many types for corrupt data
        return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    return None
