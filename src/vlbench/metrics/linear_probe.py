"""clip_benchmark's linear probe on cached image features, re-implemented on CPU in float32.

The procedure of clip_benchmark's `clip_benchmark/metrics/linear_probe.py` (clip-benchmark
1.6.2), given the support (training) features of a fold, an optional validation part and the
test features:

- `train`: the torch generator is seeded with the seed; a `torch.nn.Linear(dim, classes)` (its
  default initialisation draws from that generator), AdamW at the learning rate with the weight
  decay, cross-entropy, `epochs` passes over the support in shuffled batches (a DataLoader with
  `shuffle=True`: per pass one draw for the loader's base seed, one for its sampler's seed, then
  `randperm` from a generator with that seed), the learning rate set before every step by a
  cosine schedule without warm-up over all steps. `classes` is the largest class index of the
  training part plus one.
- the weight-decay search, where a validation part exists: 97 values `logspace(-6, 2)`, first
  the 7 of `logspace(-6, 2, 7)`, then around the best (the first with the highest validation
  top-1 accuracy; index 0 while no accuracy beats 0) at spans 8, 4, 2, 1. Training is
  deterministic for a weight decay, so each value is trained once here (the reference retrains
  the peak at every span and the chosen value for the final model, with the same result).
  Without a validation part the weight decay is 0.
- the final model is trained on the support with the chosen weight decay and scored on the
  test: `lp_acc1` and `lp_acc5` from `torch.topk` of the logits (top-5 when the test's largest
  class index is 5 or more, else no top-5 and top-1 from `topk(1)`), `lp_mean_per_class_recall`
  (scikit-learn's `balanced_accuracy_score` of the logits' argmax: the mean over the test's
  classes of each class's recall).

Differences by design: features are float32 and training runs without mixed precision (the
reference's default `amp=True` trains under float16 autocast on its required GPU); logits of the
validation and test parts are computed in one matrix product (the reference's batches of
`batch_size` give the same rows on CPU).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as functional

WEIGHT_DECAYS = np.logspace(-6, 2, num=97).tolist()
_INITIAL_DECAYS = np.logspace(-6, 2, num=7).tolist()
_SPANS = (8, 4, 2, 1)


@dataclass(frozen=True)
class LinearSettings:
    """clip_benchmark's `--fewshot_lr`, `--fewshot_epochs`, `--batch_size` (its defaults)."""

    lr: float = 0.1
    epochs: int = 10
    batch_size: int = 64


@dataclass(frozen=True)
class LinearResult:
    """One fold's scores (fractions; `top5` None where the reference reports none)."""

    top1: float
    top5: float | None
    mean_per_class_recall: float
    weight_decay: float


def _learning_rate(base: float, step: int, steps: int) -> float:
    """The cosine schedule without warm-up, in the reference's float64 arithmetic (as a Python
    float: the same value, and AdamW's scalar arithmetic on it is faster than on numpy's)."""
    return float(0.5 * (1 + np.cos(np.pi * step / steps)) * base)


def train(
    features: torch.Tensor,
    targets: torch.Tensor,
    classes: int,
    weight_decay: float,
    settings: LinearSettings,
    seed: int,
) -> torch.nn.Linear:
    """A linear layer trained as the reference's `train` does (see the module docstring); the
    global torch generator is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        model = torch.nn.Linear(features.shape[1], classes)
        optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=weight_decay)
        batches = math.ceil(len(features) / settings.batch_size)
        steps = settings.epochs * batches
        for epoch in range(settings.epochs):
            torch.empty((), dtype=torch.int64).random_()  # the loader's base seed
            sampler_seed = int(torch.empty((), dtype=torch.int64).random_().item())
            order = torch.randperm(
                len(features), generator=torch.Generator().manual_seed(sampler_seed)
            )
            for batch in range(batches):
                lr = _learning_rate(settings.lr, batch + epoch * batches, steps)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                rows = order[batch * settings.batch_size : (batch + 1) * settings.batch_size]
                optimizer.zero_grad()
                loss = functional.cross_entropy(model(features[rows]), targets[rows])
                loss.backward()
                optimizer.step()
    return model


def _logits(model: torch.nn.Linear, features: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(features)


def top_k_accuracy(logits: torch.Tensor, targets: torch.Tensor, k: int, among: int) -> float:
    """Share of rows whose target is in the first k of `logits.topk(among)` (the reference's
    `accuracy`, which takes the top `among` = max(topk) once)."""
    top = logits.topk(among, 1, True, True)[1][:, :k]
    return float((top == targets[:, None]).any(dim=1).sum().item()) / len(targets)


def mean_per_class_recall(predicted: np.ndarray, truth: np.ndarray) -> float:
    """Mean over the classes present in `truth` of the share of their rows predicted right."""
    classes, inverse = np.unique(truth, return_inverse=True)
    size = np.bincount(inverse, minlength=len(classes))
    hits = np.bincount(inverse, weights=predicted == truth, minlength=len(classes))
    return float(np.mean(hits / size))


def search_weight_decay(score: Callable[[float], float]) -> float:
    """The reference's weight-decay search over `score(weight_decay)` (validation top-1)."""
    memo: dict[int, float] = {}

    def peak(indices: list[int]) -> int:
        best, highest = 0, 0.0
        for index in indices:
            if index not in memo:
                memo[index] = score(WEIGHT_DECAYS[index])
            if highest < memo[index]:
                best, highest = index, memo[index]
        return best

    index = peak([i for i, value in enumerate(WEIGHT_DECAYS) if value in _INITIAL_DECAYS])
    for span in _SPANS:
        left, right = max(index - span, 0), min(index + span, len(WEIGHT_DECAYS) - 1)
        index = peak([left, index, right])
    return WEIGHT_DECAYS[index]


def linear_probe(
    support: np.ndarray,
    support_targets: np.ndarray,
    test: np.ndarray,
    test_targets: np.ndarray,
    classes: int,
    seed: int,
    settings: LinearSettings = LinearSettings(),
    validation: tuple[np.ndarray, np.ndarray] | None = None,
) -> LinearResult:
    """One fold of clip_benchmark's linear probe (float32 features, int class indices)."""
    x = torch.from_numpy(np.ascontiguousarray(support, dtype=np.float32))
    y = torch.from_numpy(np.asarray(support_targets, dtype=np.int64))
    weight_decay = 0.0
    # Training is deterministic for a weight decay, so the search's model of the chosen one is
    # the final model (the reference trains it once more).
    trained: dict[float, torch.nn.Linear] = {}
    if validation is not None:
        x_val = torch.from_numpy(np.ascontiguousarray(validation[0], dtype=np.float32))
        y_val = torch.from_numpy(np.asarray(validation[1], dtype=np.int64))

        def validation_top1(decay: float) -> float:
            trained[decay] = train(x, y, classes, decay, settings, seed)
            return top_k_accuracy(_logits(trained[decay], x_val), y_val, 1, 1)

        weight_decay = search_weight_decay(validation_top1)
    model = trained.get(weight_decay) or train(x, y, classes, weight_decay, settings, seed)
    truth = torch.from_numpy(np.asarray(test_targets, dtype=np.int64))
    logits = _logits(model, torch.from_numpy(np.ascontiguousarray(test, dtype=np.float32)))
    with_top5 = int(truth.max()) >= 5
    among = 5 if with_top5 else 1
    return LinearResult(
        top1=top_k_accuracy(logits, truth, 1, among),
        top5=top_k_accuracy(logits, truth, 5, among) if with_top5 else None,
        mean_per_class_recall=mean_per_class_recall(logits.argmax(axis=1).numpy(), truth.numpy()),
        weight_decay=weight_decay,
    )
