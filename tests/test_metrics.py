import math

import numpy as np
import pytest
from statsmodels.stats.proportion import proportion_confint

from prompttune.core.errors import UserError
from prompttune.statistics import (
    OBJECTIVES,
    accuracy,
    confusion,
    get_objective,
    macro_f1,
    service_accuracy,
    summarize,
    valid_accuracy,
    valid_rate,
)

# Six examples, three gold classes, one invalid response (index 3).
GOLD = [0, 0, 1, 1, 2, 2]
PRED = [0, 1, 1, None, 2, 0]


def test_accuracy_counts_invalid_as_wrong():
    assert accuracy(GOLD, PRED) == pytest.approx(3 / 6)


def test_macro_f1_matches_hand_computation():
    # class 0: tp=1 fp=1 fn=1 -> 0.5; class 1: tp=1 fp=1 fn=1 (the invalid) -> 0.5;
    # class 2: tp=1 fp=0 fn=1 -> 2/3.  Class 3 (n_classes=4) is absent everywhere: skipped.
    expected = (0.5 + 0.5 + 2 / 3) / 3
    assert macro_f1(GOLD, PRED, n_classes=3) == pytest.approx(expected)
    assert macro_f1(GOLD, PRED, n_classes=4) == pytest.approx(expected)


def test_macro_f1_counts_class_predicted_but_never_gold_as_zero():
    # class 1 is only predicted (a false positive): F1 0 for it, 2/3 for class 0.
    assert macro_f1([0, 0, 0], [0, 0, 1], n_classes=2) == pytest.approx((0.8 + 0.0) / 2)


def test_confusion_has_invalid_column():
    expected = np.array(
        [
            [1, 1, 0, 0, 0],
            [0, 1, 0, 0, 1],
            [1, 0, 1, 0, 0],
            [0, 0, 0, 0, 0],
        ]
    )
    matrix = confusion(GOLD, PRED, n_classes=4)
    assert matrix.shape == (4, 5)
    np.testing.assert_array_equal(matrix, expected)
    assert matrix.sum() == len(GOLD)


def test_valid_rate_valid_accuracy_and_their_product():
    v, a = valid_rate(PRED), valid_accuracy(GOLD, PRED)
    assert v == pytest.approx(5 / 6)
    assert a == pytest.approx(3 / 5)
    assert service_accuracy(GOLD, PRED) == pytest.approx(v * a)
    assert service_accuracy(GOLD, PRED) == pytest.approx(accuracy(GOLD, PRED))


def test_all_invalid_responses():
    pred = [None, None]
    assert valid_rate(pred) == 0.0
    assert math.isnan(valid_accuracy([0, 1], pred))
    assert service_accuracy([0, 1], pred) == 0.0
    assert accuracy([0, 1], pred) == 0.0


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError):
        accuracy([0, 1], [0])


def test_objective_registry():
    assert set(OBJECTIVES) == {"accuracy", "macro_f1", "valid_rate", "service_accuracy"}
    assert get_objective("accuracy")(GOLD, PRED, 3) == pytest.approx(0.5)
    assert get_objective("macro_f1")(GOLD, PRED, 3) == pytest.approx(macro_f1(GOLD, PRED, 3))
    assert get_objective("valid_rate")(GOLD, PRED, 3) == pytest.approx(5 / 6)
    assert get_objective("service_accuracy")(GOLD, PRED, 3) == pytest.approx(0.5)


def test_unknown_objective_is_a_user_error():
    with pytest.raises(UserError, match=r"unknown objective 'f2'; choose from accuracy"):
        get_objective("f2")


def test_summarize():
    summary = summarize(GOLD, PRED, n_classes=3)
    low, high = proportion_confint(3, 6, alpha=0.05, method="wilson")
    assert summary.n == 6
    assert summary.accuracy == pytest.approx(0.5)
    assert summary.accuracy_ci == pytest.approx((low, high))
    assert summary.macro_f1 == pytest.approx(macro_f1(GOLD, PRED, 3))
    assert summary.valid_rate == pytest.approx(5 / 6)
    assert summary.valid_accuracy == pytest.approx(0.6)
    assert summary.service_accuracy == pytest.approx(0.5)
