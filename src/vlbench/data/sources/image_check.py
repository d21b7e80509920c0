"""Decide whether encoded image bytes are an image: by their header alone, or by decoding them
(cheaply: a reduced-size JPEG draft when possible)."""

from __future__ import annotations

import re

from PIL import Image

from vlbench.data.sources.records import EncodedImage, encoded_size, open_encoded

# PIL names the stream object in some messages ("cannot identify image file <_io.BytesIO object
# at 0x7f...>"): the address would make the recorded reason differ from run to run.
STREAM_REPR = re.compile(r"<_io\.BytesIO object at 0x[0-9a-fA-F]+>")

DRAFT_SIZE = (64, 64)


def _reason(exc: Exception) -> str:
    """The first line of a PIL error, without the stream's address."""
    return STREAM_REPR.sub("the image bytes", f"{type(exc).__name__}: {exc}").splitlines()[0][:200]


def header_error(data: EncodedImage) -> str | None:
    """None when `data` opens as an image PIL reads (format and size identified from the
    header; the pixels are not decoded), else a short reason."""
    if not encoded_size(data):
        return "no bytes"
    try:
        with Image.open(open_encoded(data)):
            pass
    except Exception as exc:  # PIL raises many types for corrupt data
        return _reason(exc)
    return None


def decode_error(data: EncodedImage) -> str | None:
    """None when `data` decodes as an image, else a short reason."""
    if not encoded_size(data):
        return "no bytes"
    try:
        with Image.open(open_encoded(data)) as image:
            if image.format == "JPEG":
                image.draft("RGB", DRAFT_SIZE)
            image.load()
    except Exception as exc:  # PIL raises many types for corrupt data
        return _reason(exc)
    return None
