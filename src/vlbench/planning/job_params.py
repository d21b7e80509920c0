"""The params that tie a job to the user files and settings it reads.

Snakemake reruns a job whose params change, so a fingerprint of every user-supplied file a job
reads is one of its params: an edit anywhere in a benchmark folder or a model file reruns exactly
the jobs that read it. Each fingerprint is computed once per parse (one stat per file,
vlbench.planning.fingerprints).
"""

from __future__ import annotations

from typing import Any

from vlbench.embedding.identity import embedding_identity
from vlbench.planning.checks import model_fingerprint, source_fingerprint


class JobParams:
    """Fingerprints and identities read from the run's config (the dict the rules see)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self._source_files: dict[str, str] = {}
        self._model_files: dict[str, str] = {}

    def source_files(self, benchmark: str) -> str:
        """Fingerprint of the user-supplied files of a benchmark's source ("" for hub sources)."""
        if benchmark not in self._source_files:
            source = self.config["benchmarks"][benchmark]["source"]
            self._source_files[benchmark] = source_fingerprint(source)
        return self._source_files[benchmark]

    def model_files(self, model: str) -> str:
        """Fingerprint of the user-supplied files of a model (model_config, local weights)."""
        if model not in self._model_files:
            self._model_files[model] = model_fingerprint(self.config["models"][model])
        return self._model_files[model]

    def embedding_identity(self, model: str) -> dict[str, Any]:
        """What a model's embeddings depend on besides the rows (`vlbench.embedding.identity`)."""
        return embedding_identity(
            self.config["models"][model], self.model_files(model), self.config["embedding"]
        )
