"""BioCLIP's few_shot.py, restated literally for the tests (the reference is not importable).

Imageomics/bioclip, src/evaluation/few_shot.py (`split`, `CL2N`, `get_acc` and the k-shot / fold
loops of its main block; the same in Imageomics/bioclip-2 @ 49e1cf50): the global Python
`random` seeded with the fold number, `random.shuffle` of each class's feature list in place (in
class insertion order), the support set stacked with `np.vstack` and its assert, CL2N with
`numpy.linalg.norm`, centroids by reshape and mean, distances of every centroid to every query
by broadcasting, `np.argpartition(..., 1, axis=0)[:1]` and `scipy.stats.mode`. With
`fresh=True` it shuffles a copy of the list instead, as BioCLIP 2's
src/evaluation/classification.py does.
"""

from __future__ import annotations

import random

import numpy as np
from numpy import linalg as LA
from scipy.stats import mode


def reference_fold_accuracies(
    features: np.ndarray, labels: list, kshot_list: list[int], nfold: int, fresh: bool = False
) -> dict[int, list[float]]:
    """BioCLIP's few-shot evaluation of (features, labels) in sample order: k -> fold accuracies."""
    select: dict = {}
    for feature, target in zip(features, labels, strict=True):
        if target not in select:
            select[target] = {"feature": []}
        select[target]["feature"].append(feature)
    n_class = len(select)
    results = {}
    for kshot in kshot_list:
        acc_list = []
        for n in range(nfold):
            train, label, test, target = [], [], [], []
            random.seed(n)
            for k, v in select.items():
                pool = v["feature"][:] if fresh else v["feature"]
                random.shuffle(pool)
                train.append(pool[:kshot])
                test += pool[kshot:]
                label += [k] * kshot
                target += [k] * (len(pool) - kshot)
            flatten_train = np.vstack(train)
            label = np.array(label)
            assert kshot * len(train) == flatten_train.shape[0] == label.shape[0]

            def centre_and_normalise(x, mean):
                x = x - mean
                return x / LA.norm(x, 2, 1)[:, None]

            train_mean = flatten_train.mean(axis=0)
            flatten_train = centre_and_normalise(flatten_train, train_mean)
            queries = centre_and_normalise(test, train_mean)
            centres = flatten_train.reshape(n_class, kshot, flatten_train.shape[-1]).mean(1)
            distance = LA.norm(centres[:, None, :] - queries, 2, axis=-1)
            nearest = np.argpartition(distance, 1, axis=0)[:1]
            predicted = mode(np.take(label[::kshot], nearest), axis=0, keepdims=True)[0]
            acc_list.append((predicted.astype(int) == np.array(target)).mean())
        results[kshot] = acc_list
    return results
