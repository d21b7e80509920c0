"""mteb's k-shot logistic-regression classifier on cached image features.

mteb 2.26.24's `AbsTaskClassification` (`mteb/abstasks/classification.py`) fits its
`evaluator_model`, scikit-learn's `LogisticRegression(max_iter=100)` with `random_state` set to
the task's seed (42, `AbsTask.__init__`), on each experiment's undersampled training features
(`vlbench.metrics.probe_folds.mteb_folds`) with their labels, predicts the test features, and
scores the predictions with scikit-learn: `accuracy` (the main score of its image
classification tasks, e.g. `Imagenet1kClassification`: 16 samples per label, 5 experiments) and
`f1`, the macro F1 over the labels of the truth and the predictions. The scores are averaged
over the experiments. The classifier is scikit-learn's own; the sampling and the scores are
re-implemented (the scores are checked against scikit-learn's in the tests).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LogisticResult:
    """One experiment's scores (fractions)."""

    accuracy: float
    f1: float
    # False where lbfgs stopped at max_iter (scikit-learn's ConvergenceWarning, which mteb shows).
    converged: bool = True


def macro_f1(predicted: np.ndarray, truth: np.ndarray) -> float:
    """Mean over the labels of truth and predictions of 2 TP / (true + predicted) per label."""
    labels, inverse = np.unique(np.concatenate([truth, predicted]), return_inverse=True)
    truth_index, predicted_index = inverse[: len(truth)], inverse[len(truth) :]
    true_count = np.bincount(truth_index, minlength=len(labels))
    predicted_count = np.bincount(predicted_index, minlength=len(labels))
    hits = np.bincount(truth_index[truth == predicted], minlength=len(labels))
    return float(np.mean(2.0 * hits / (true_count + predicted_count)))


def logistic_probe(
    support: np.ndarray,
    support_targets: np.ndarray,
    test: np.ndarray,
    test_targets: np.ndarray,
    seed: int = 42,
    max_iter: int = 100,
) -> LogisticResult:
    """One mteb experiment: fit on the support, score the test predictions."""
    # scikit-learn here, not at import (seconds): only the logistic probe jobs need it.
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(max_iter=max_iter, random_state=seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(support, np.asarray(support_targets))
    predicted = model.predict(test)
    truth = np.asarray(test_targets)
    return LogisticResult(
        accuracy=float(np.mean(predicted == truth)),
        f1=macro_f1(predicted, truth),
        converged=not any(issubclass(w.category, ConvergenceWarning) for w in caught),
    )
