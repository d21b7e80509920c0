"""What produced an embedding: adapter, weights (sha256), libraries, precision, device."""

from __future__ import annotations

from typing import Any

from vlbench.embedding.models.base import EmbeddingModel
from vlbench.hashing import weights_sha256
from vlbench.versions import package_versions

LIBRARIES = ("torch", "torchvision", "open_clip_torch", "transformers", "timm", "numpy", "pillow")


def library_versions() -> dict[str, str | None]:
    """Installed versions of the libraries that shape embeddings (None when absent)."""
    return package_versions(LIBRARIES)


def model_provenance(model: EmbeddingModel, batch_size: int | None = None) -> dict[str, Any]:
    """A JSON-serialisable record of a loaded model; hashes every weight file it read."""
    return {
        "source": dict(model.source),
        "weights": [
            {"path": str(path), "sha256": weights_sha256(path), "bytes": path.stat().st_size}
            for path in model.weights
        ],
        "precision": model.precision,
        "device": str(model.device),
        "batch_size": batch_size,
        "context_length": model.context_length,
        "image_transform": model.image_transform,
        "versions": library_versions(),
    }
