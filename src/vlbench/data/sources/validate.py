"""Load-time checks of a prepared benchmark: unique ids, resolvable references, non-empty texts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from vlbench.data.sources.records import Candidates
from vlbench.errors import VlbenchError


def _first_duplicates(ids: Iterable[str], limit: int = 5) -> list[str]:
    return [value for value, count in Counter(ids).items() if count > 1][:limit]


def check_unique(ids: list[str], what: str, where: str) -> None:
    """Fail naming a few duplicated ids."""
    duplicates = _first_duplicates(ids)
    if duplicates:
        raise VlbenchError(f"{where}: duplicate {what} id(s): {', '.join(map(repr, duplicates))}")


def check_texts(texts: list[tuple[str, str, str | None]], where: str) -> None:
    """Every text is a non-empty string after the protocol's own processing."""
    for text_id, text, _ in texts:
        if text is None or not str(text).strip():
            raise VlbenchError(f"{where}: text {text_id!r} is empty after processing")


def check_qrels(
    qrels: list[tuple[str, str, int]], image_ids: set[str], text_ids: set[str], where: str
) -> None:
    """Every judgement names an existing image and text, once."""
    for image_id, text_id, _ in qrels:
        if image_id not in image_ids:
            raise VlbenchError(f"{where}: judgement names unknown image id {image_id!r}")
        if text_id not in text_ids:
            raise VlbenchError(f"{where}: judgement names unknown text id {text_id!r}")
    duplicates = _first_duplicates(f"{i}|{t}" for i, t, _ in qrels)
    if duplicates:
        raise VlbenchError(f"{where}: duplicate judgement(s) for image|text {duplicates[0]!r}")


def check_candidates(candidates: list[Candidates], ids: Mapping[str, set[str]], where: str) -> None:
    """Every candidate list belongs to an existing query and names existing gallery items."""
    gallery_of = {"image": "text", "text": "image"}
    check_unique([f"{c.query_modality}|{c.query_id}" for c in candidates], "candidate query", where)
    for row in candidates:
        if row.query_id not in ids[row.query_modality]:
            raise VlbenchError(
                f"{where}: candidate list for unknown {row.query_modality} query {row.query_id!r}"
            )
        gallery = ids[gallery_of[row.query_modality]]
        missing = [cid for cid in row.candidate_ids if cid not in gallery]
        if missing:
            raise VlbenchError(
                f"{where}: query {row.query_id!r} has candidate id(s) not in the gallery: "
                f"{', '.join(map(repr, missing[:5]))}"
            )
        if not row.candidate_ids:
            raise VlbenchError(f"{where}: query {row.query_id!r} has no candidates")
        check_unique(row.candidate_ids, f"candidate (query {row.query_id!r})", where)


def check_count(actual: int, expected: int | None, what: str, where: str) -> None:
    """Compare a row count with the count known for the pinned revision."""
    if expected is not None and actual != expected:
        raise VlbenchError(
            f"{where}: expected {expected} {what} for this pinned source, found {actual} "
            "(incomplete download, wrong revision or wrong subset)"
        )
