"""vlbench: reproducible CLIP-style retrieval and zero-shot benchmarks."""

__version__ = "0.1.0"
