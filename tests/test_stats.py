import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binomtest, bootstrap, multinomial
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint

from prompttune.reports.optimize_report import confirmable_gain
from prompttune.statistics import (
    AcceptRule,
    accuracy_sigma,
    adjust_pvalues,
    keep_any_win,
    obrien_fleming_spent,
    paired_bootstrap_ci,
    paired_compare,
    selection_bias_scale,
    wilson_ci,
)
from prompttune.statistics.stats import examples_for_gain, mcnemar_power, smallest_confirmable_gain


def paired_arrays(both_right: int, b: int, c: int, both_wrong: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-example correctness (candidate, incumbent) realising a given 2x2 table."""
    cand = [True] * both_right + [True] * b + [False] * c + [False] * both_wrong
    inc = [True] * both_right + [False] * b + [True] * c + [False] * both_wrong
    return np.array(cand), np.array(inc)


TABLES = [(30, 10, 2, 8), (20, 0, 0, 5), (10, 5, 5, 10), (40, 3, 12, 5), (5000, 260, 200, 1000)]


@pytest.mark.parametrize("both_right,b,c,both_wrong", TABLES)
def test_paired_compare_matches_statsmodels_mcnemar(both_right, b, c, both_wrong):
    comp = paired_compare(*paired_arrays(both_right, b, c, both_wrong))
    n = both_right + b + c + both_wrong
    assert (comp.n, comp.b, comp.c, comp.both_right, comp.both_wrong) == (n, b, c, both_right, both_wrong)
    expected = mcnemar([[both_right, c], [b, both_wrong]], exact=True).pvalue
    assert comp.p_two_sided == pytest.approx(expected, rel=1e-12)
    assert comp.diff == pytest.approx((b - c) / n)
    if b + c == 0:
        assert comp.p_one_sided == 1.0
    else:
        assert comp.p_one_sided == pytest.approx(binomtest(b, b + c, 0.5, alternative="greater").pvalue)
    if b > c:  # the exact two-sided p doubles the smaller tail, which is the one-sided p
        assert comp.p_one_sided == pytest.approx(comp.p_two_sided / 2, rel=1e-9)


def test_paired_compare_rejects_unequal_lengths():
    with pytest.raises(ValueError):
        paired_compare([True, False], [True])


@pytest.mark.parametrize("successes,n", [(0, 10), (7, 10), (10, 10), (63, 200), (1, 3)])
def test_wilson_ci_matches_statsmodels(successes, n):
    expected = proportion_confint(successes, n, alpha=0.05, method="wilson")
    assert wilson_ci(successes, n) == pytest.approx(expected)
    assert wilson_ci(successes, n, alpha=0.1) == pytest.approx(
        proportion_confint(successes, n, alpha=0.1, method="wilson")
    )


def test_wilson_ci_without_examples_is_uninformative():
    assert wilson_ci(0, 0) == (0.0, 1.0)


def test_paired_bootstrap_ci_contains_true_diff_and_is_seeded():
    cand, inc = paired_arrays(both_right=55, b=25, c=5, both_wrong=15)  # diff = +0.20
    low, high = paired_bootstrap_ci(cand, inc, n_boot=2000, seed=3)
    assert low < 0.20 < high
    assert low > 0.0  # 25 vs 5 discordant pairs is a clear win
    assert paired_bootstrap_ci(cand, inc, n_boot=2000, seed=3) == (low, high)


def test_paired_bootstrap_ci_agrees_with_scipy_paired_resampling():
    rng = np.random.default_rng(5)
    cand = rng.random(300) < 0.75
    inc = np.where(rng.random(300) < 0.7, cand, rng.random(300) < 0.7)
    result = bootstrap(
        (cand.astype(float), inc.astype(float)),
        lambda x, y: x.mean() - y.mean(),
        paired=True,
        vectorized=False,
        n_resamples=4000,
        method="percentile",
        rng=np.random.default_rng(6),
    )
    ours = paired_bootstrap_ci(cand, inc, n_boot=4000, seed=6)
    assert ours == pytest.approx(
        (result.confidence_interval.low, result.confidence_interval.high), abs=0.01
    )


def test_paired_bootstrap_ci_without_discordant_pairs_is_zero():
    cand, inc = paired_arrays(both_right=30, b=0, c=0, both_wrong=10)
    assert paired_bootstrap_ci(cand, inc) == (0.0, 0.0)


def test_adjust_pvalues_holm_and_bh_by_hand():
    reject, corrected = adjust_pvalues([0.01, 0.04, 0.03], method="holm")
    # Holm: sorted 0.01*3, 0.03*2, 0.04*1 -> made monotone: 0.03, 0.06, 0.06
    assert corrected == pytest.approx([0.03, 0.06, 0.06])
    assert reject == [True, False, False]
    reject, corrected = adjust_pvalues([0.01, 0.04, 0.03], method="fdr_bh")
    # BH: 0.01*3/1, 0.03*3/2, 0.04*3/3 -> step-up minimum: 0.03, 0.04, 0.04
    assert corrected == pytest.approx([0.03, 0.04, 0.04])
    assert reject == [True, True, True]
    assert adjust_pvalues([]) == ([], [])


def test_holm_steps_down_through_ties_and_caps_at_one():
    """Holm is computed here, not by statsmodels (whose Holm runs a full garbage collection per call); the
    values statsmodels gives, by hand: ties, the step-down stop, alpha and the cap at 1."""
    # sorted 0.001*4, 0.02*3, 0.02*2 -> 0.06, 0.5*1; 0.02 > 0.05/3 stops the step-down after the first
    assert adjust_pvalues([0.02, 0.02, 0.5, 0.001], "holm", 0.05) == ([False, False, False, True],
                                                                      pytest.approx([0.06, 0.06, 0.5, 0.004]))
    assert adjust_pvalues([0.9, 0.8], "holm") == ([False, False], [1.0, 1.0])
    assert adjust_pvalues([0.01, 0.02, 0.03], "holm", 0.1)[0] == [True, True, True]


def test_accuracy_sigma_and_selection_bias_scale():
    assert accuracy_sigma(0.7, 100) == pytest.approx(math.sqrt(0.21 / 100))
    assert selection_bias_scale(0.05, 1) == 0.0
    assert selection_bias_scale(0.05, 0) == 0.0
    assert selection_bias_scale(0.02, 100) == pytest.approx(0.02 * math.sqrt(2 * math.log(100)))


def test_selection_bias_scale_bounds_simulated_maximum():
    rng = np.random.default_rng(0)
    sigma, n_candidates = 0.03, 200
    mean_max = rng.normal(0.0, sigma, size=(2000, n_candidates)).max(axis=1).mean()
    bound = selection_bias_scale(sigma, n_candidates)
    assert 0.75 * bound < mean_max < bound


# --- AcceptRule ----------------------------------------------------------------


def test_looks_walk_the_stages_up_to_the_examples_available():
    rule = AcceptRule()
    assert rule.looks(300) == [50, 100, 200, 300]
    assert rule.looks(1000) == [50, 100, 200, 400]
    assert [rule.next_n(n, 300) for n in (0, 50, 60, 200, 300)] == [50, 100, 100, 300, None]


def test_accept_rule_validates_its_fields():
    with pytest.raises(ValueError):
        AcceptRule(stages=(100, 50))
    with pytest.raises(ValueError):
        AcceptRule(stages=())
    with pytest.raises(ValueError):
        AcceptRule(alpha=0.0)


def test_spending_adds_up_to_alpha_and_saves_it_for_the_last_look():
    rule = AcceptRule()
    shares = [rule.look_alpha(n, 300, 0.05) for n in rule.looks(300)]
    assert sum(shares) == pytest.approx(0.05)
    assert shares[0] < 1e-4 and shares[-1] > 0.03
    assert obrien_fleming_spent(0.05, 1.0) == pytest.approx(0.05)


def test_decide_accepts_clear_win_at_first_stage():
    decision = AcceptRule().decide(*paired_arrays(both_right=20, b=25, c=0, both_wrong=5), n_max=400)
    assert decision.verdict == "accept"
    assert decision.n == 50
    assert decision.p_value == decision.comparison.p_one_sided < decision.threshold


def test_decide_rejects_clear_loss_at_first_stage():
    decision = AcceptRule().decide(*paired_arrays(both_right=20, b=2, c=20, both_wrong=8), n_max=400)
    assert decision.verdict == "reject"
    # Without futility the same evidence only says "keep looking".
    no_futility = AcceptRule(futility_p=0.0)
    assert no_futility.decide(*paired_arrays(20, 2, 20, 8), n_max=400).verdict == "continue"


def test_decide_keeps_a_slightly_trailing_candidate_until_the_last_look():
    rule = AcceptRule()
    assert rule.decide(*paired_arrays(both_right=24, b=8, c=10, both_wrong=8), n_max=400).verdict == "continue"
    assert rule.decide(*paired_arrays(24, 8, 10, 8), n_max=50).verdict == "reject"  # all examples seen
    assert rule.decide(*paired_arrays(324, 8, 10, 58), n_max=400).verdict == "reject"  # n = 400, last stage


def test_futility_margin_tolerates_small_deficits():
    tolerant = AcceptRule(futility_margin=0.5)
    assert tolerant.decide(*paired_arrays(20, 2, 20, 8), n_max=400).verdict == "continue"


def test_a_smaller_share_of_alpha_blocks_a_marginal_win():
    """A sweep of three challenges gives each alpha / 3: a win that passes alone fails there."""
    rule = AcceptRule(alpha=0.05)
    marginal = paired_arrays(both_right=300, b=13, c=4, both_wrong=83)  # n = 400, p = 0.025
    alone = rule.decide(*marginal, n_max=400)
    in_sweep = rule.decide(*marginal, n_max=400, alpha=0.05 / 3)
    assert alone.verdict == "accept" and in_sweep.verdict == "reject"


def test_keep_any_win():
    assert keep_any_win([True, True, False], [True, False, False])
    assert not keep_any_win([True, False], [False, True])


# --- simulations ----------------------------------------------------------------


def run_staged(rule: AcceptRule, cand: np.ndarray, inc: np.ndarray):
    """Feed one simulated run to the rule look by look, as the search driver does."""
    n = rule.looks(cand.size)[0]
    while True:
        decision = rule.decide(cand[:n], inc[:n], n_max=cand.size)
        if decision.verdict != "continue":
            return decision
        n = rule.next_n(n, cand.size)


def simulate_pairs(rng, runs: int, n: int, probs) -> tuple[np.ndarray, np.ndarray]:
    """Correctness of (candidate, incumbent) with cell probabilities (both right, b, c, both wrong)."""
    cell = rng.choice(4, size=(runs, n), p=probs)
    return np.isin(cell, (0, 1)), np.isin(cell, (0, 2))


@pytest.mark.parametrize(
    "probs",
    [
        pytest.param([0.49, 0.21, 0.21, 0.09], id="independent"),  # both 0.7, independent
        pytest.param([0.60, 0.10, 0.10, 0.20], id="agree-80pct"),  # both 0.7, agree on 80%
    ],
)
def test_aa_false_accept_rate(probs):
    rng = np.random.default_rng(2024)
    rule = AcceptRule(stages=(50, 100, 200, 400), alpha=0.05)
    cand, inc = simulate_pairs(rng, runs=1500, n=400, probs=probs)
    assert cand.mean() == pytest.approx(inc.mean(), abs=0.01)
    decisions = [run_staged(rule, c, i) for c, i in zip(cand, inc)]
    false_accepts = np.mean([d.verdict == "accept" for d in decisions])
    naive_accepts = np.mean([keep_any_win(c, i) for c, i in zip(cand, inc)])
    assert false_accepts <= rule.alpha + 0.02
    assert naive_accepts > 0.3
    assert np.mean([d.n for d in decisions]) < 400  # futility saves examples


def test_power_on_a_clearly_better_candidate():
    rng = np.random.default_rng(7)
    cand = rng.random((300, 400)) < 0.85
    inc = rng.random((300, 400)) < 0.60
    decisions = [run_staged(AcceptRule(), c, i) for c, i in zip(cand, inc)]
    assert np.mean([d.verdict == "accept" for d in decisions]) > 0.9


def test_clearly_worse_candidate_is_rejected_at_the_first_stage():
    rng = np.random.default_rng(11)
    cand = rng.random((300, 400)) < 0.4
    inc = rng.random((300, 400)) < 0.8
    decisions = [run_staged(AcceptRule(), c, i) for c, i in zip(cand, inc)]
    assert all(d.verdict == "reject" for d in decisions)
    assert np.mean([d.n == 50 for d in decisions]) > 0.95


def test_holm_equals_statsmodels_on_random_sweeps_with_ties():
    """adjust_pvalues' own Holm (statsmodels' runs a full gc.collect per call) gives statsmodels' answer."""
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 17):
        for _ in range(12):  # each multipletests call collects garbage: 200 took 106 s in the full suite
            p = np.round(rng.uniform(0, 0.2, n), 2)  # rounded: ties included
            reject, corrected, _, _ = multipletests(p, alpha=0.05, method="holm")
            ours = adjust_pvalues(list(p), "holm", 0.05)
            assert ours[0] == [bool(r) for r in reject]
            assert np.allclose(ours[1], corrected)


def brute_force_power(n: int, gain: float, alpha: float, losses: float = 0.10) -> float:
    """The flip model's power by enumerating every (wins, losses) table of n examples: its multinomial
    probability times whether scipy's exact one-sided binomial test confirms it (p <= alpha, as Holm)."""
    shares = [losses + gain, losses, 1.0 - 2.0 * losses - gain]
    return sum(multinomial.pmf([w, lost, n - w - lost], n, shares)
               for w in range(n + 1) for lost in range(n + 1 - w)
               if w + lost and binomtest(w, w + lost, 0.5, alternative="greater").pvalue <= alpha)


@pytest.mark.parametrize("n,gain,alpha", [(30, 0.0, 0.05), (30, 0.10, 0.05), (30, 0.34, 0.05), (60, 0.2, 0.01),
                                          (100, 0.15, 0.025), (17, 0.5, 0.05)])
def test_mcnemar_power_is_the_exact_sum_over_every_table(n: int, gain: float, alpha: float) -> None:
    assert mcnemar_power(n, gain, alpha) == pytest.approx(brute_force_power(n, gain, alpha), abs=1e-9)


def test_with_no_gain_the_power_is_the_tests_size_at_most_alpha() -> None:
    assert all(mcnemar_power(n, 0.0, 0.05) <= 0.05 for n in (10, 30, 100, 1000))


@pytest.mark.parametrize("n", [30, 100])
def test_the_smallest_confirmable_gain_is_where_the_exact_power_reaches_80_percent(n: int) -> None:
    gain = smallest_confirmable_gain(n, 0.05)
    assert gain is not None
    assert brute_force_power(n, gain, 0.05) == pytest.approx(0.80, abs=1e-4)
    assert brute_force_power(n, gain - 0.01, 0.05) < 0.80


def test_30_test_examples_confirm_only_a_30_point_gain_and_1000_one_under_5_points() -> None:
    assert mcnemar_power(30, 0.10, 0.05) == pytest.approx(0.15, abs=0.01)  # issue 40: "about 15%" at +10 points
    small, large = confirmable_gain(30, 0.05), confirmable_gain(1000, 0.05)
    assert smallest_confirmable_gain(30, 0.05) >= 0.30 and small[1] is not None
    assert "the test split of 30 examples confirms a gain of ≥ 34.2 points with 80% power at α = 0.05" in small[0]
    assert smallest_confirmable_gain(1000, 0.05) <= 0.05 and large[1] is None


def test_the_baseline_accuracy_bounds_the_gain_and_holm_lowers_the_level() -> None:
    # Wins come from the baseline's errors: a baseline at 0.8 leaves 10 points, too few at n = 30.
    assert smallest_confirmable_gain(30, 0.05, baseline_accuracy=0.8) is None
    statement, warning = confirmable_gain(30, 0.05, baseline_accuracy=0.8)
    assert "confirms no gain" in statement and "none the baseline leaves room for" in statement and warning
    # A baseline right on fewer than 10% of the examples can lose only those.
    assert smallest_confirmable_gain(1000, 0.05, 0.05) == pytest.approx(
        smallest_confirmable_gain(1000, 0.05, flip=0.05))
    assert smallest_confirmable_gain(300, 0.05 / 3) > smallest_confirmable_gain(300, 0.05)
    assert "α/K = 0.0167, Holm's first step over K = 3" in confirmable_gain(300, 0.05, top_k=3)[0]


def test_examples_for_gain_is_where_the_power_crosses_80_percent() -> None:
    needed = examples_for_gain(0.05, 0.05)
    assert mcnemar_power(needed, 0.05, 0.05) >= 0.80 > mcnemar_power(needed - 1, 0.05, 0.05)
    assert smallest_confirmable_gain(needed, 0.05) <= 0.05


def test_a_spent_alpha_confirms_nothing_and_no_size_search_runs_forever() -> None:
    # Older releases made an interim look after a recorded final one, at α = 0; their reports are still read.
    assert confirmable_gain(90, 0.0) == ("the test split of 90 examples confirms no gain at α = 0: this run's α is "
                                         "spent", None)
    with pytest.raises(ValueError):
        examples_for_gain(0.05, 0.0)
    with pytest.raises(ValueError):
        examples_for_gain(0.9, 0.05)  # more than the flips leave room for


def test_docs_verdict_table_is_what_benchmarks_confirmable_gain_prints() -> None:
    repo = Path(__file__).resolve().parent.parent
    printed = subprocess.run([sys.executable, str(repo / "benchmarks" / "confirmable_gain.py")], check=True,
                             capture_output=True, text=True).stdout
    table = [line for line in printed.splitlines() if line.startswith("|")]
    assert len(table) == 6 and "\n".join(table) in (repo / "docs" / "verdict.md").read_text()
    assert "5 points need about 651 test examples, 10 points about 199" in printed
