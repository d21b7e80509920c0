"""Which images train and which test a classifier, fold by fold, as the references draw them.

Our zero-shot benchmarks have one split, so every fold trains on the images its reference's
k-shot sampler picks and tests on all the others (the rest of the benchmark). The samplers:

- `fewshot` (BioCLIP's `few_shot.py`): `vlbench.metrics.fewshot.draw_splits`, the support of
  every fold class-major (the few-shot job reads its folds from the file this module writes);

- `linear` (clip_benchmark's `metrics/linear_probe.py`, `--fewshot_k`, `--seed`,
  `--val_proportion`): fold n is clip_benchmark run with `--seed n`. With a validation
  proportion p, `torch.utils.data.random_split(images, [1 - p, p])` first sets a validation part
  aside (the CLI's `--val_proportion`); then `torch.randperm` over the training part's positions,
  and every image in that order joins the support while its class has fewer than k. A class
  with fewer than k images makes the reference stop ("insufficient data for this eval"): such a
  k is not computable. Both draws come from one torch generator seeded with the fold's seed
  (clip_benchmark draws them from torch's global generator after `torch.manual_seed(seed)` and
  after building the model, so its own sample also depends on how many random numbers the
  model's construction consumed; with a fresh seed right before, it is this one).
- `logistic` (mteb's `AbsTaskClassification._undersample_data`): one list of image positions
  is shuffled in place by `numpy.random.RandomState(seed).shuffle` once per experiment (the
  same seed every time, so experiment n's order is that permutation applied n + 1 times), and
  the first k images of each class in that order are its support. A class with k images or
  fewer gives all of them to the support and none to the test (mteb has no minimum).

Class indices are the classes in order of their first image in the benchmark's sample order
(`class_members`, as the few-shot evaluation numbers them).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from vlbench.errors import VlbenchError
from vlbench.metrics.fewshot import class_members, draw_splits
from vlbench.paths import FOLD_CLASSIFIERS

CLASSIFIERS = FOLD_CLASSIFIERS
ROLES = ("support", "validation")
FOLD_COLUMNS = ("classifier", "k", "fold", "role", "order", "image_id")


@dataclass(frozen=True)
class ProbeFold:
    """One fold of one k: image positions (in the benchmark's sample order) by role.

    `support` is in the order the sampler picked it (the order the reference trains on);
    `validation` is empty unless the sampler sets a validation part aside; `not_computable`
    says why the reference cannot run this k (then the positions are empty).
    """

    shots: int
    fold: int
    support: np.ndarray
    validation: np.ndarray
    not_computable: str = ""


def class_indices(labels: Sequence[object]) -> tuple[list[str], np.ndarray]:
    """Class names in order of first appearance and every image's class index."""
    classes, members = class_members(labels)
    index = np.empty(len(labels), dtype=np.int64)
    for number, rows in enumerate(members):
        index[rows] = number
    return classes, index


def _short_of(classes: Sequence[str], counts: dict[int, int], shots: int) -> str:
    """The reference's stop for a k: every class it met with fewer than k picks, smallest first."""
    short = sorted((count, classes[target]) for target, count in counts.items() if count < shots)
    named = ", ".join(f"{name!r} ({count})" for count, name in short[:5])
    more = f" and {len(short) - 5} more" if len(short) > 5 else ""
    return (
        f"k={shots}: {len(short)} class(es) with fewer than {shots} training images: "
        f"{named}{more} (clip_benchmark's linear probe stops: insufficient data for this eval)"
    )


def clip_benchmark_folds(
    labels: Sequence[object], shots: Sequence[int], folds: int, validation_proportion: float = 0.0
) -> Iterator[ProbeFold]:
    """clip_benchmark's k-shot samples, fold n drawn with seed n (see the module docstring)."""
    import torch  # here, not at import: the folds job of the other samplers needs no torch

    classes, targets = class_indices(labels)
    positions = np.arange(len(targets))
    for k in shots:
        for fold in range(folds):
            generator = torch.Generator().manual_seed(fold)
            validation = np.empty(0, dtype=np.int64)
            training = positions
            if validation_proportion > 0:
                kept, held = torch.utils.data.random_split(
                    positions.tolist(),
                    [1 - validation_proportion, validation_proportion],
                    generator=generator,
                )
                training = np.asarray(kept.indices, dtype=np.int64)
                validation = np.asarray(held.indices, dtype=np.int64)
            order = training[torch.randperm(len(training), generator=generator).numpy()]
            counts: dict[int, int] = {}
            picked = []
            for position in order.tolist():
                target = int(targets[position])
                count = counts.setdefault(target, 0)
                if count < k:
                    counts[target] = count + 1
                    picked.append(position)
            if any(count != k for count in counts.values()):
                empty = np.empty(0, dtype=np.int64)
                yield ProbeFold(k, fold, empty, empty, _short_of(classes, counts, k))
                continue
            yield ProbeFold(k, fold, np.asarray(picked, dtype=np.int64), validation)


def mteb_folds(
    labels: Sequence[object], shots: Sequence[int], folds: int, seed: int = 42
) -> Iterator[ProbeFold]:
    """mteb's undersampling, experiment n of each k after n + 1 in-place shuffles."""
    _, targets = class_indices(labels)
    for k in shots:
        order = list(range(len(targets)))
        for fold in range(folds):
            np.random.RandomState(seed).shuffle(order)
            counts: dict[int, int] = {}
            picked = []
            for position in order:
                target = int(targets[position])
                if counts.get(target, 0) < k:
                    counts[target] = counts.get(target, 0) + 1
                    picked.append(position)
            yield ProbeFold(k, fold, np.asarray(picked, dtype=np.int64), np.empty(0, np.int64))


def fewshot_folds_of(labels: Sequence[object], settings: Mapping[str, Any]) -> list[ProbeFold]:
    """BioCLIP's few-shot folds (`vlbench.metrics.fewshot.draw_splits`): the support of every
    fold of every computable k, class-major; a k it cannot run as one fold with its reason."""
    shots = list(settings["shots"])
    splits, reasons = draw_splits(labels, shots, int(settings["folds"]), settings["shuffle"])
    empty = np.empty(0, dtype=np.int64)
    folds = [ProbeFold(split.shots, split.fold, split.support, empty) for split in splits]
    folds += [ProbeFold(k, 0, empty, empty, reason) for k, reason in reasons.items()]
    return sorted(folds, key=lambda item: (shots.index(item.shots), item.fold))


def draw_folds(classifier: str, labels: Sequence[object], settings: dict) -> list[ProbeFold]:
    """Every fold of a classifier's config entry (`shots`, `folds` and its sampler's keys)."""
    if classifier == "fewshot":
        return fewshot_folds_of(labels, settings)
    if len(set(labels)) < 2:
        raise VlbenchError(
            f"{classifier} probe needs at least two classes, found {len(set(labels))}"
        )
    shots, folds = list(settings["shots"]), int(settings["folds"])
    if classifier == "linear":
        proportion = float(settings["validation_proportion"])
        return list(clip_benchmark_folds(labels, shots, folds, proportion))
    if classifier == "logistic":
        return list(mteb_folds(labels, shots, folds, int(settings["seed"])))
    raise VlbenchError(f"unknown probe classifier {classifier!r} (one of {', '.join(CLASSIFIERS)})")


def folds_table(
    classifier: str, folds: Sequence[ProbeFold], image_ids: Sequence[str]
) -> pl.DataFrame:
    """The folds as rows (classifier, k, fold, role, order, image_id): support images in the
    order the reference trains on them, then any validation images; a not-computable fold has
    one row with no image and its reason."""
    rows = []
    for item in folds:
        if item.not_computable:
            rows.append((classifier, item.shots, item.fold, None, None, None, item.not_computable))
            continue
        for role, positions in zip(ROLES, (item.support, item.validation), strict=True):
            rows += [
                (classifier, item.shots, item.fold, role, order, image_ids[position], None)
                for order, position in enumerate(positions.tolist())
            ]
    schema = {
        "classifier": pl.String,
        "k": pl.Int64,
        "fold": pl.Int64,
        "role": pl.String,
        "order": pl.Int64,
        "image_id": pl.String,
        "not_computable": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def folds_from_table(table: pl.DataFrame, image_ids: Sequence[str], source: str) -> list[ProbeFold]:
    """The folds of a folds file, as positions in `image_ids` (the benchmark's sample order)."""
    position = {item: row for row, item in enumerate(image_ids)}
    folds = []
    for (k, fold), rows in table.sort("k", "fold", "role", "order").group_by(
        ["k", "fold"], maintain_order=True
    ):
        reason = rows["not_computable"].drop_nulls()
        if reason.len():
            empty = np.empty(0, dtype=np.int64)
            folds.append(ProbeFold(int(k), int(fold), empty, empty, str(reason[0])))
            continue
        parts = {}
        for role in ROLES:
            ids = rows.filter(pl.col("role") == role)["image_id"].to_list()
            missing = [item for item in ids if item not in position]
            if missing:
                raise VlbenchError(
                    f"{source}: image {missing[0]!r} of k={k} fold {fold} is not in the "
                    "benchmark's images (rerun the folds job)"
                )
            parts[role] = np.fromiter((position[item] for item in ids), dtype=np.int64)
        folds.append(ProbeFold(int(k), int(fold), parts["support"], parts["validation"]))
    return folds
