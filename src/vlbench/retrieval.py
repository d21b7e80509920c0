"""Retrieval directions, the metric CSV contract and the BioMedFlickr notebook's column names."""

from __future__ import annotations

import polars as pl

from vlbench.metrics_table import EXTRA_COLUMNS, METRIC_COLUMNS

__all__ = ["DIRECTIONS", "EXTRA_COLUMNS", "METRIC_COLUMNS", "notebook_columns"]

# direction -> (query modality, gallery modality)
DIRECTIONS = {"image_to_text": ("image", "text"), "text_to_image": ("text", "image")}
# The BioMedFlickr notebook names the directions the other way round: its "I2T" column holds
# text queries against the image gallery (standard text_to_image), its "T2I" the reverse.
NOTEBOOK_DIRECTIONS = {"text_to_image": "I2T", "image_to_text": "T2I"}
_NOTEBOOK_METRICS = {"recall": "R"}


def notebook_columns(rows: pl.DataFrame) -> pl.DataFrame:
    """Add `notebook_column`: the BioMedFlickr notebook's column name of each row (e.g. the
    text_to_image Recall@1 row is "I2T R@1"); rows it has no name for get null."""

    def name(row: dict) -> str | None:
        direction = NOTEBOOK_DIRECTIONS.get(row["direction"])
        metric = _NOTEBOOK_METRICS.get(row["metric"])
        if direction is None or metric is None or row["k"] is None:
            return None
        return f"{direction} {metric}@{row['k']}"

    names = [name(row) for row in rows.select("direction", "metric", "k").iter_rows(named=True)]
    return rows.with_columns(pl.Series("notebook_column", names, dtype=pl.String))
