"""Per-example classification metrics that keep invalid responses visible.

`pred[i] is None` marks an output that maps to no label (or to several). Such
outputs are never silently dropped: they count as wrong for accuracy and as
misses for F1, and are reported separately through the valid rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from prompttune.core.errors import UserError
from prompttune.statistics.stats import wilson_ci

Objective = Callable[[Sequence[int], Sequence[int | None], int], float]

_INVALID = -1


def _encode(gold: Sequence[int], pred: Sequence[int | None]) -> tuple[np.ndarray, np.ndarray]:
    """Integer arrays with invalid predictions as -1, so numpy comparisons treat them as misses."""
    if len(gold) != len(pred):
        raise ValueError(f"gold and pred differ in length: {len(gold)} vs {len(pred)}")
    gold_arr = np.asarray(gold, dtype=int).reshape(-1)
    pred_arr = np.array([_INVALID if p is None else int(p) for p in pred], dtype=int)
    return gold_arr, pred_arr


def accuracy(gold: Sequence[int], pred: Sequence[int | None]) -> float:
    """Share of examples answered correctly; invalid responses count as wrong."""
    gold_arr, pred_arr = _encode(gold, pred)
    return float(np.mean(gold_arr == pred_arr)) if gold_arr.size else math.nan


def macro_f1(gold: Sequence[int], pred: Sequence[int | None], n_classes: int) -> float:
    """Unweighted mean of per-class F1, so rare classes weigh as much as common ones.

    An invalid response is a false negative for its gold class and a false
    positive for none. Classes absent from both gold and pred have undefined
    F1 and are skipped rather than counted as 0 or 1.
    """
    gold_arr, pred_arr = _encode(gold, pred)
    scores = []
    for k in range(n_classes):
        is_gold, is_pred = gold_arr == k, pred_arr == k
        if not (is_gold.any() or is_pred.any()):
            continue
        tp = np.sum(is_gold & is_pred)
        scores.append(2 * tp / (is_gold.sum() + is_pred.sum()))
    return float(np.mean(scores)) if scores else math.nan


def confusion(gold: Sequence[int], pred: Sequence[int | None], n_classes: int) -> np.ndarray:
    """Counts with rows = gold class, columns = predicted class; the last column counts invalids."""
    gold_arr, pred_arr = _encode(gold, pred)
    columns = np.where(pred_arr == _INVALID, n_classes, pred_arr)
    matrix = np.zeros((n_classes, n_classes + 1), dtype=int)
    np.add.at(matrix, (gold_arr, columns), 1)
    return matrix


def valid_rate(pred: Sequence[int | None]) -> float:
    """v: share of responses that map to exactly one label."""
    return float(np.mean([p is not None for p in pred])) if len(pred) else math.nan


def valid_accuracy(gold: Sequence[int], pred: Sequence[int | None]) -> float:
    """a: accuracy among valid responses only; nan when none is valid."""
    gold_arr, pred_arr = _encode(gold, pred)
    valid = pred_arr != _INVALID
    return float(np.mean(gold_arr[valid] == pred_arr[valid])) if valid.any() else math.nan


def service_accuracy(gold: Sequence[int], pred: Sequence[int | None]) -> float:
    """v * a: what a user of the prompt gets; separates format failures from wrong answers.

    Equals accuracy with invalid counted as wrong; 0.0 when nothing is valid.
    """
    v = valid_rate(pred)
    return 0.0 if v == 0.0 else v * valid_accuracy(gold, pred)


OBJECTIVES: dict[str, Objective] = {
    "accuracy": lambda gold, pred, n_classes: accuracy(gold, pred),
    "macro_f1": macro_f1,
    "valid_rate": lambda gold, pred, n_classes: valid_rate(pred),
    "service_accuracy": lambda gold, pred, n_classes: service_accuracy(gold, pred),
}


def get_objective(name: str) -> Objective:
    """Look up an objective by its configuration name."""
    try:
        return OBJECTIVES[name]
    except KeyError:
        raise UserError(
            f"unknown objective {name!r}; choose from {', '.join(sorted(OBJECTIVES))}"
        ) from None


@dataclass(frozen=True)
class MetricSummary:
    """The numbers reported for one prompt on one split."""

    n: int
    accuracy: float
    accuracy_ci: tuple[float, float]  # Wilson 95%
    macro_f1: float
    valid_rate: float
    valid_accuracy: float
    service_accuracy: float


def summarize(gold: Sequence[int], pred: Sequence[int | None], n_classes: int) -> MetricSummary:
    """All metrics at once, with an interval on accuracy so small splits are not over-read."""
    gold_arr, pred_arr = _encode(gold, pred)
    n = int(gold_arr.size)
    return MetricSummary(
        n=n,
        accuracy=accuracy(gold, pred),
        accuracy_ci=wilson_ci(int(np.sum(gold_arr == pred_arr)), n),
        macro_f1=macro_f1(gold, pred, n_classes),
        valid_rate=valid_rate(pred),
        valid_accuracy=valid_accuracy(gold, pred),
        service_accuracy=service_accuracy(gold, pred),
    )
