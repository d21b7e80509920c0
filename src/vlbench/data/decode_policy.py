"""How encoded image bytes become the PIL image a model's preprocess sees, per source format.

Each benchmark's reference code decodes differently: the `datasets` Image feature applies the
EXIF orientation and clip_benchmark's webdataset loader does not; some references convert to
RGB before the model's transform, others hand it the image in its original mode, so resize and
crop run on palette or CMYK pixels and the RGB conversion comes after them. A `DecodePolicy`
names both choices; each source format's default is in its entry of
`vlbench.data.sources.FORMATS` (its reference is documented in config/README.md). The prepare
job writes the resolved policy into the images parquet's schema metadata, so every reader of
that file decodes it the same way.

This module imports neither torch nor PIL: planning and shard digests read it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from vlbench.errors import VlbenchError

METADATA_KEY = b"vlbench.decode"
CONVERT_CHOICES = ("before", "after", "before_if_rgba_or_p")
# Modes the BioCLIP/BioCAP evaluation loader converts to RGB before the transform.
RGBA_OR_P = ("RGBA", "P")


@dataclass(frozen=True)
class DecodePolicy:
    """`exif`: apply the EXIF orientation tag; `convert`: when the image becomes RGB.

    `before`: right after decoding; `after`: after the preprocess's geometric steps (the image
    goes through resize and crop in its original mode); `before_if_rgba_or_p`: before for
    RGBA and palette images, after for every other mode.
    """

    exif: bool
    convert: str

    def __post_init__(self) -> None:
        if self.convert not in CONVERT_CHOICES:
            raise VlbenchError(
                f"decode.convert must be one of {', '.join(CONVERT_CHOICES)}, got {self.convert!r}"
            )

    def converts_first(self, mode: str) -> bool:
        """Whether an image of `mode` is converted to RGB before the geometric steps."""
        return self.convert == "before" or (
            self.convert == "before_if_rgba_or_p" and mode in RGBA_OR_P
        )

    def as_dict(self) -> dict[str, Any]:
        """The policy as a JSON-ready mapping."""
        return asdict(self)

    @property
    def label(self) -> str:
        """A short readable name, e.g. `exif+before`, used in cache folder names."""
        return f"{'exif' if self.exif else 'noexif'}+{self.convert}"


# What the workflow did before policies existed (and the BioMedFlickr card script does).
LEGACY = DecodePolicy(exif=True, convert="before")


def resolve_policy(
    default: DecodePolicy, override: Mapping[str, Any] | None, where: str = "benchmark"
) -> DecodePolicy:
    """A format's default policy with the config's `decode` keys (if any) put over it."""
    merged = {**default.as_dict(), **(override or {})}
    unknown = sorted(set(merged) - {"exif", "convert"})
    if unknown:
        known = "known: exif, convert"
        raise VlbenchError(f"{where}.decode: unknown key(s) {', '.join(unknown)} ({known})")
    if not isinstance(merged["exif"], bool):
        raise VlbenchError(f"{where}.decode.exif must be true or false, got {merged['exif']!r}")
    try:
        return DecodePolicy(**merged)
    except VlbenchError as exc:
        raise VlbenchError(f"{where}.{exc}") from None


def policy_metadata(policy: DecodePolicy) -> dict[bytes, bytes]:
    """The parquet schema metadata that records `policy` in an images file."""
    return {METADATA_KEY: json.dumps(policy.as_dict(), sort_keys=True).encode()}


def policy_of_metadata(metadata: Mapping[bytes, bytes] | None, where: str) -> DecodePolicy:
    """The policy recorded in parquet schema metadata; LEGACY for files written without one."""
    raw = (metadata or {}).get(METADATA_KEY)
    if raw is None:
        return LEGACY
    try:
        fields = json.loads(raw)
        return DecodePolicy(exif=bool(fields["exif"]), convert=str(fields["convert"]))
    except (ValueError, KeyError, TypeError, VlbenchError) as exc:
        message = f"{where}: unreadable decode policy in the parquet metadata ({exc})"
        raise VlbenchError(message) from exc


def read_policy(images_parquet: str | Path) -> DecodePolicy:
    """The decode policy an images parquet was prepared with."""
    try:
        metadata = pq.read_schema(images_parquet).metadata
    except OSError as exc:
        raise VlbenchError(f"{images_parquet}: not a readable parquet file ({exc})") from exc
    return policy_of_metadata(metadata, str(images_parquet))
