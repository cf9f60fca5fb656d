import math

import numpy as np
import pytest
from scipy.stats import spearmanr

from prompttune.statistics import (
    cps,
    posix,
    posix_over_examples,
    rank_agreement,
    sensitivity_quantiles,
    summarize_prompt_set,
    top_k_iou,
    top_two_gap,
)


def test_cps_published_value():
    assert round(cps(0.80, 0.6172), 4) == 0.6538


def test_cps_without_gap_is_max():
    assert cps(0.7, 0.7) == pytest.approx(0.7)


# logp[i, j] = log P(y_j | x_i); diagonal -2.0, -1.0, -0.5; lengths 2, 4, 1 tokens.
LOGP = np.array(
    [
        [-2.0, -3.0, -1.5],
        [-2.5, -1.0, -2.0],
        [-4.0, -2.0, -0.5],
    ]
)
LENGTHS = np.array([2, 4, 1])


def test_posix_hand_computed():
    # (i, j): |logp[i,j] - logp[j,j]| / L_j
    # (0,1) |-3.0+1.0|/4 = 0.5    (0,2) |-1.5+0.5|/1 = 1.0
    # (1,0) |-2.5+2.0|/2 = 0.25   (1,2) |-2.0+0.5|/1 = 1.5
    # (2,0) |-4.0+2.0|/2 = 1.0    (2,1) |-2.0+1.0|/4 = 0.25
    # sum 4.5 over N(N-1) = 6 ordered pairs -> 0.75
    assert posix(LOGP, LENGTHS) == pytest.approx(0.75)


def test_posix_insensitive_example_is_zero_and_mean_over_examples():
    # Every prompt gives each response the same likelihood: wording does not matter.
    flat = np.tile(np.array([-1.0, -2.0, -3.0]), (3, 1))
    assert posix(flat, LENGTHS) == 0.0
    assert posix_over_examples([(LOGP, LENGTHS), (flat, LENGTHS)]) == pytest.approx(0.375)


def test_posix_rejects_bad_shapes():
    with pytest.raises(ValueError):
        posix(LOGP[:, :2], LENGTHS)
    with pytest.raises(ValueError):
        posix(np.zeros((1, 1)), np.ones(1))


def test_top_k_iou():
    a = [0.9, 0.8, 0.7, 0.1]
    b = [0.1, 0.8, 0.7, 0.9]
    assert top_k_iou(a, b, k=2) == pytest.approx(1 / 3)  # {0,1} vs {3,1}
    assert top_k_iou(a, a, k=2) == 1.0
    assert top_k_iou(a, b, k=4) == 1.0
    with pytest.raises(ValueError):
        top_k_iou(a, b, k=0)


def test_rank_agreement_is_spearman():
    a = [0.61, 0.55, 0.70, 0.40, 0.52]
    b = [0.58, 0.60, 0.72, 0.35, 0.50]
    assert rank_agreement(a, b) == pytest.approx(spearmanr(a, b).statistic)
    assert rank_agreement(a, a) == pytest.approx(1.0)
    assert rank_agreement(a, [-x for x in a]) == pytest.approx(-1.0)


def test_summarize_prompt_set_perfect_agreement():
    # Prompt 0 is right on every example, prompts 1 and 2 wrong: every example ranks
    # the prompts the same way, so W = 1 and Friedman chi2 = m (k - 1) W = 4 * 2 = 8.
    correct = np.array([[1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]])
    summary = summarize_prompt_set(correct)
    assert summary.accuracies == (1.0, 0.0, 0.0)
    assert summary.spread == 1.0
    assert summary.max_p == 1.0
    assert summary.avg_p == pytest.approx(1 / 3)
    assert summary.cps == pytest.approx(cps(1.0, 1 / 3))
    assert summary.std == pytest.approx(np.std([1.0, 0.0, 0.0], ddof=1))
    assert summary.friedman_stat == pytest.approx(8.0)
    assert summary.kendall_w == pytest.approx(1.0)
    assert 0.0 < summary.friedman_p < 0.05


def test_summarize_prompt_set_noise_has_low_w():
    rng = np.random.default_rng(0)
    correct = (rng.random((5, 300)) < 0.7).astype(int)
    summary = summarize_prompt_set(correct)
    assert 0.0 <= summary.kendall_w < 0.05
    assert summary.friedman_p > 0.01


def test_summarize_prompt_set_all_tied_gives_nan():
    summary = summarize_prompt_set(np.ones((3, 5)))
    assert math.isnan(summary.kendall_w)
    assert math.isnan(summary.friedman_stat)
    assert math.isnan(summary.friedman_p)
    assert summary.spread == 0.0


def test_summarize_prompt_set_two_prompts_has_no_friedman():
    summary = summarize_prompt_set(np.array([[1, 0, 1], [0, 0, 1]]))
    assert math.isnan(summary.kendall_w)
    assert summary.spread == pytest.approx(1 / 3)


def test_top_two_gap():
    scores = np.array([[-1.0, -2.0, -0.5], [0.0, -3.0, -3.0], [-1.0, -1.0, -4.0]])
    np.testing.assert_allclose(top_two_gap(scores), [0.5, 3.0, 0.0])


def test_sensitivity_quantiles():
    quantiles = sensitivity_quantiles(np.arange(101))
    assert quantiles == {0.5: 50.0, 0.9: 90.0, 0.99: 99.0}
