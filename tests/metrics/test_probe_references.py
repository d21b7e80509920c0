"""The probe classifiers equal their references on the same features: clip_benchmark's
`linear_probe.evaluate` (its sampling, seed, weight-decay search and scores) and mteb's k-shot
logistic regression (`AbsTaskClassification`'s undersampling, evaluator and scores).

clip_benchmark's `evaluate` requires CUDA; on this CPU machine the tests run it with `.cuda()` and
`.to("cuda")` as no-ops (DataParallel passes through without GPUs) and `amp=False`, from feature
files in its cache layout, so it never featurizes. Its `accuracy` helper converts a one-element
array with `float()`, which numpy 2.4 refuses; the tests give it the same sum through `.item()`.
The references are imported inside the tests (seconds each), so that collecting the suite does
not pay for them in every worker.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from vlbench.metrics.linear_probe import (
    WEIGHT_DECAYS,
    LinearSettings,
    linear_probe,
    mean_per_class_recall,
    search_weight_decay,
)
from vlbench.metrics.logistic_probe import logistic_probe, macro_f1
from vlbench.metrics.probe_folds import clip_benchmark_folds, draw_folds, mteb_folds


def clustered(classes: int, per_class: int, dim: int, noise: float, seed: int):
    """L2-normalised float32 features around one centre per class, labels shuffled."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), per_class)
    rng.shuffle(labels)
    centres = rng.normal(size=(classes, dim))
    features = (centres[labels] + noise * rng.normal(size=(len(labels), dim))).astype(np.float32)
    return features / np.linalg.norm(features, axis=1, keepdims=True), labels


def _accuracy(output, target, topk=(1,)):
    """clip_benchmark's `accuracy` with `.item()` where numpy 2.4 refuses `float()`."""
    pred = output.topk(max(topk), 1, True, True)[1].t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))
    return [float(correct[:k].reshape(-1).float().sum(0).item()) / len(target) for k in topk]


@pytest.fixture
def cpu_clip_benchmark(monkeypatch: pytest.MonkeyPatch):
    """clip_benchmark's linear_probe module, runnable on the CPU."""
    from clip_benchmark.metrics import linear_probe as reference

    to = torch.Tensor.to
    monkeypatch.setattr(torch.nn.Module, "cuda", lambda self, *a, **k: self)
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    monkeypatch.setattr(
        torch.Tensor, "to", lambda self, *a, **k: self if a[:1] == ("cuda",) else to(self, *a, **k)
    )
    monkeypatch.setattr(reference, "accuracy", _accuracy)
    return reference


def run_clip_benchmark(
    reference, root: Path, features, labels, k: int, seed: int, proportion: float, settings
):
    """clip_benchmark's CLI path on cached features: seed, --val_proportion split, evaluate.
    Returns its metrics and the test positions it was given (everything outside our fold)."""
    torch.manual_seed(seed)
    positions = list(range(len(labels)))
    val = []
    if proportion:
        kept, held = torch.utils.data.random_split(positions, [1 - proportion, proportion])
        positions, val = list(kept.indices), list(held.indices)
    [fold] = [f for f in clip_benchmark_folds(labels.tolist(), [k], seed + 1, proportion)][seed:]
    test = sorted(set(positions) - set(fold.support.tolist()))
    cache = root / "model"
    os.makedirs(cache, exist_ok=True)
    for split, part in (("train", positions), ("val", val), ("test", test)):
        torch.save(torch.from_numpy(features[part]), cache / f"features_{split}.pt")
        torch.save(torch.from_numpy(labels[part]), cache / f"targets_{split}.pt")
    metrics = reference.evaluate(
        None, None, None, k, settings.batch_size, 0, settings.lr, settings.epochs, "model",
        seed, str(root), "cuda", val_dataloader=object() if proportion else None, amp=False,
    )  # fmt: skip
    return metrics, fold, np.asarray(positions), np.asarray(test), np.asarray(val, dtype=np.int64)


@pytest.mark.parametrize(
    ("seed", "proportion", "classes"), [(0, 0.0, 7), (1, 0.0, 12), (0, 0.25, 12), (2, 0.3, 4)]
)
def test_linear_probe_equals_clip_benchmarks_evaluate(
    cpu_clip_benchmark, tmp_path: Path, seed: int, proportion: float, classes: int
) -> None:
    features, labels = clustered(classes, 14, 24, 3.0, seed)
    settings = LinearSettings(lr=0.1, epochs=4, batch_size=16)
    expected, fold, training, test, val = run_clip_benchmark(
        cpu_clip_benchmark, tmp_path, features, labels, 3, seed, proportion, settings
    )
    assert np.array_equal(fold.validation, val)
    ours = linear_probe(
        features[fold.support],
        labels[fold.support],
        features[test],
        labels[test],
        int(labels[training].max()) + 1,
        seed,
        settings,
        (features[val], labels[val]) if proportion else None,
    )
    assert ours.top1 == expected["lp_acc1"]
    if np.isnan(expected["lp_acc5"]):
        assert ours.top5 is None  # fewer than 6 classes: the reference has no top-5
    else:
        assert ours.top5 == expected["lp_acc5"]
    assert ours.mean_per_class_recall == expected["lp_mean_per_class_recall"]
    assert ours.weight_decay == expected["weight_decay"]


def test_a_class_short_of_k_is_not_computable_as_the_reference_stops(
    cpu_clip_benchmark, tmp_path: Path
) -> None:
    features, labels = clustered(5, 6, 8, 1.0, 0)
    labels[labels == 4] = 3
    labels[np.flatnonzero(labels == 3)[:3]] = 4  # class 4 has three images
    reference = cpu_clip_benchmark
    expected = run_clip_benchmark(
        reference, tmp_path, features, labels, 4, 0, 0.0, LinearSettings()
    )[0]
    assert expected is None  # "insufficient data for this eval"
    [fold] = clip_benchmark_folds(labels.tolist(), [4], 1)
    assert (
        "fewer than 4 training images" in fold.not_computable and "'4' (3)" in fold.not_computable
    )


@pytest.mark.parametrize("table", range(6))
def test_weight_decay_search_picks_what_the_references_find_peak_picks(
    cpu_clip_benchmark, monkeypatch: pytest.MonkeyPatch, table: int
) -> None:
    """The search over a validation accuracy per weight decay (plateaus, several peaks and all
    zeros included), with the reference's training replaced by that table."""
    reference = cpu_clip_benchmark
    rng = np.random.default_rng(table)
    accuracies = np.round(rng.random(len(WEIGHT_DECAYS)), 1) * (table != 0)
    monkeypatch.setattr(reference, "train", lambda loader, i, o, decay, *a: decay)
    carry = SimpleNamespace  # infer's logits and target: `.float()` hands the decay on
    monkeypatch.setattr(
        reference,
        "infer",
        lambda decay, *a: (carry(float=lambda: decay), carry(float=lambda: None)),
    )
    monkeypatch.setattr(
        reference, "accuracy", lambda decay, t, topk: [accuracies[WEIGHT_DECAYS.index(decay)]]
    )
    initial = [i for i, v in enumerate(WEIGHT_DECAYS) if v in np.logspace(-6, 2, 7).tolist()]
    peak = reference.find_peak(WEIGHT_DECAYS, initial, *[None] * 8, False, 0)
    for span in (8, 4, 2, 1):
        left, right = max(peak - span, 0), min(peak + span, len(WEIGHT_DECAYS) - 1)
        peak = reference.find_peak(WEIGHT_DECAYS, [left, peak, right], *[None] * 8, False, 0)
    assert search_weight_decay(lambda d: accuracies[WEIGHT_DECAYS.index(d)]) == WEIGHT_DECAYS[peak]


@pytest.mark.parametrize("shots", [16, 5])
def test_logistic_probe_equals_mtebs_experiments(shots: int) -> None:
    """mteb's sampler on the same labels picks the same images, in the same order, in all five
    experiments, and its evaluator scores the same accuracy and F1 on the rest."""
    import datasets
    from mteb.tasks.classification.eng.imagenet1k import Imagenet1kClassification
    from mteb.timing import TimingStack

    features, labels = clustered(9, 22, 20, 2.5, 3)
    labels = np.where(labels == 8, 7, labels)  # an uneven class
    task = Imagenet1kClassification()
    task.samples_per_label = shots
    task.evaluator_model = task.evaluator_model.set_params(random_state=task.seed)
    dataset = datasets.Dataset.from_dict({task.label_column_name: labels.tolist()})
    ours = list(mteb_folds(labels.tolist(), [shots], task.n_experiments, task.seed))
    assert len(ours) == 5 and task.seed == 42
    order = None
    for experiment, fold in enumerate(ours):
        _, order, picked = task._undersample_data(dataset, experiment, order)
        assert fold.support.tolist() == picked
        test = np.setdiff1d(np.arange(len(labels)), fold.support)
        expected, _ = task._run_experiment(
            dataset.select(picked), dataset.select(test.tolist()),
            features[picked], features[test], timer=TimingStack(),
        )  # fmt: skip
        result = logistic_probe(features[picked], labels[picked], features[test], labels[test])
        assert result.accuracy == expected["accuracy"]
        assert result.f1 == expected["f1"]


@pytest.mark.parametrize("seed", range(5))
def test_scores_equal_scikit_learns(seed: int) -> None:
    """Macro F1 over the labels of truth and predictions (a predicted label missing from the
    truth included) and mean per-class recall, against scikit-learn's."""
    import sklearn.metrics

    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 6, size=50)
    predicted = np.where(rng.random(50) < 0.4, truth, rng.integers(0, 8, size=50))
    assert macro_f1(predicted, truth) == sklearn.metrics.f1_score(truth, predicted, average="macro")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "y_pred contains classes not in y_true"
        expected = sklearn.metrics.balanced_accuracy_score(truth, predicted)
    assert mean_per_class_recall(predicted, truth) == expected


def test_mteb_sampler_gives_a_small_class_all_its_images() -> None:
    labels = ["a"] * 10 + ["b"] * 3
    [fold] = mteb_folds(labels, [5], 1)
    assert sorted(np.asarray(labels)[fold.support].tolist()) == ["a"] * 5 + ["b"] * 3


def test_one_class_is_refused_with_the_classifier_named() -> None:
    with pytest.raises(Exception, match="logistic probe needs at least two classes, found 1"):
        draw_folds("logistic", ["a"] * 4, {"shots": [1], "folds": 1, "seed": 42})
