"""Decide whether encoded image bytes decode, cheaply (reduced-size JPEG draft when possible)."""

from __future__ import annotations

import io
import re

from PIL import Image

# PIL names the stream object in some messages ("cannot identify image file <_io.BytesIO object
# at 0x7f...>"): the address would make the recorded reason differ from run to run.
STREAM_REPR = re.compile(r"<_io\.BytesIO object at 0x[0-9a-fA-F]+>")

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
        reason = STREAM_REPR.sub("the image bytes", f"{type(exc).__name__}: {exc}")
        return reason.splitlines()[0][:200]
    return None
