"""The tables stage's final targets follow the config: paper tables, plots, examples, provenance."""

from __future__ import annotations

from vlbench.planning.targets import table_targets

DIRECTIONS = ["image_to_text", "text_to_image"]


def test_targets_cover_tables_plots_provenance_and_examples() -> None:
    targets = table_targets(["biomedflickr"], {"b": "paired"}, ["m"], DIRECTIONS, 3)
    assert set(targets) == {
        *(
            f"results/tables/paper/biomedflickr.{ext}"
            for ext in ("md", "csv", "tex", "html", "rst", "coverage.json")
        ),
        "results/tables/coverage.md",
        "results/tables/front_page.rst",
        "results/tables/b.html",
        "results/provenance/b.html",
        "results/plots/b/recall_at_k.png",
        "results/plots/b/model_bars.png",
        "results/plots/b/examples/m/image_to_text.png",
        "results/plots/b/examples/m/text_to_image.png",
    }


def test_no_examples_when_switched_off_or_for_candidate_protocols() -> None:
    off = table_targets([], {"b": "paired"}, ["m"], DIRECTIONS, 0)
    candidates = table_targets([], {"b": "taxon_candidates"}, ["m"], DIRECTIONS, 3)
    for targets in (off, candidates):
        assert not any("/examples/" in target for target in targets)
        assert "results/plots/b/recall_at_k.png" in targets
