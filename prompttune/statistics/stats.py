"""Paired significance tests and the staged accept rule.

Prompt candidates are scored on the same examples as the incumbent, so every
comparison here is paired: only the discordant examples (one prompt right, the
other wrong) carry evidence, which is what McNemar's test uses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.optimize import brentq
from scipy.stats import binom, binomtest, norm, sem
from scipy.stats import t as student_t
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

Verdict = Literal["accept", "reject", "continue"]


def wilson_ci(successes: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval: unlike the normal one it stays inside [0, 1] at small n.

    With no examples nothing is known, so the whole range (0, 1) is returned.
    """
    if n == 0:
        return (0.0, 1.0)
    low, high = proportion_confint(successes, n, alpha=alpha, method="wilson")
    return (float(low), float(high))


@dataclass(frozen=True)
class PairedComparison:
    """Counts of a paired 2x2 table and the exact tests on it."""

    n: int
    b: int  # candidate right, incumbent wrong
    c: int  # candidate wrong, incumbent right
    both_right: int
    both_wrong: int
    p_two_sided: float  # exact McNemar
    p_one_sided: float  # exact binomial, H1: candidate better
    diff: float  # accuracy(candidate) - accuracy(incumbent)


def _paired_arrays(
    candidate_correct: Sequence[bool], incumbent_correct: Sequence[bool]
) -> tuple[np.ndarray, np.ndarray]:
    cand = np.asarray(candidate_correct, dtype=bool)
    inc = np.asarray(incumbent_correct, dtype=bool)
    if cand.shape != inc.shape or cand.ndim != 1:
        raise ValueError(
            f"paired inputs must be 1-D and equally long, got {cand.shape} and {inc.shape}"
        )
    return cand, inc


def _one_sided_p(wins: int, losses: int) -> float:
    """P(at least `wins` of the discordant pairs favour one side | no difference)."""
    if wins + losses == 0:
        return 1.0
    return float(binomtest(wins, wins + losses, p=0.5, alternative="greater").pvalue)


def paired_compare(
    candidate_correct: Sequence[bool], incumbent_correct: Sequence[bool]
) -> PairedComparison:
    """Tabulate per-example correctness of two prompts and test the difference.

    With no examples the difference is reported as 0.0 (no evidence either way).
    """
    cand, inc = _paired_arrays(candidate_correct, incumbent_correct)
    n = int(cand.size)
    b = int(np.sum(cand & ~inc))
    c = int(np.sum(~cand & inc))
    both_right = int(np.sum(cand & inc))
    both_wrong = n - b - c - both_right
    table = [[both_right, c], [b, both_wrong]]
    return PairedComparison(
        n=n,
        b=b,
        c=c,
        both_right=both_right,
        both_wrong=both_wrong,
        p_two_sided=float(mcnemar(table, exact=True).pvalue),
        p_one_sided=_one_sided_p(b, c),
        diff=(b - c) / n if n else 0.0,
    )


def paired_bootstrap_ci(
    candidate_correct: Sequence[bool],
    incumbent_correct: Sequence[bool],
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval for the accuracy difference, resampling examples jointly.

    Each example contributes d = +1, 0 or -1 to the difference, so resampling n
    example indices with replacement is exactly a multinomial draw of how many
    of each kind land in the resample; drawing the counts keeps memory O(n_boot)
    at any n.
    """
    cand, inc = _paired_arrays(candidate_correct, incumbent_correct)
    n = cand.size
    if n == 0:
        raise ValueError("paired_bootstrap_ci needs at least one example")
    b = np.sum(cand & ~inc)
    c = np.sum(~cand & inc)
    probs = np.array([b, c, n - b - c], dtype=float) / n
    counts = np.random.default_rng(seed).multinomial(n, probs, size=n_boot)
    diffs = (counts[:, 0] - counts[:, 1]) / n
    low, high = np.quantile(diffs, [alpha / 2, 1 - alpha / 2])
    return (float(low), float(high))


def adjust_pvalues(
    pvalues: Sequence[float],
    method: Literal["holm", "fdr_bh"] = "holm",
    alpha: float = 0.05,
) -> tuple[list[bool], list[float]]:
    """Correct a sweep's p-values: Holm controls the chance of any false accept, BH the false share."""
    if len(pvalues) == 0:
        return ([], [])
    if method == "holm":
        return _holm(pvalues, alpha)
    reject, corrected, _, _ = multipletests(list(pvalues), alpha=alpha, method=method)
    return ([bool(r) for r in reject], [float(p) for p in corrected])


def _holm(pvalues: Sequence[float], alpha: float) -> tuple[list[bool], list[float]]:
    """Holm's step-down, as statsmodels' `multipletests(method="holm")` computes it, without the full
    garbage collection that function runs on every call (a fifth of a second in a large process,
    paid by every held-out verdict).

    >>> _holm([0.01, 0.04, 0.03], 0.05)
    ([True, False, False], [0.03, 0.06, 0.06])
    """
    p = np.asarray(pvalues, dtype=float)
    order = np.argsort(p)
    factors = np.arange(len(p), 0, -1)
    reject, corrected = np.empty(len(p), dtype=bool), np.empty(len(p))
    reject[order] = np.logical_and.accumulate(p[order] <= alpha / factors)  # up to the first that fails
    corrected[order] = np.minimum(np.maximum.accumulate(p[order] * factors), 1.0)
    return ([bool(r) for r in reject], [float(x) for x in corrected])


FLIP_SHARE = 0.10  # share of examples assumed to go from right to wrong under the new prompt
TARGET_POWER = 0.80


def _critical_wins(discordant: np.ndarray, alpha: float) -> np.ndarray:
    """Per count m of discordant pairs, the fewest wins w the held-out test confirms: the smallest w whose
    exact one-sided p, P(Bin(m, 1/2) >= w), is at most alpha (as Holm compares it); m + 1 where none is.

    `binom.ppf` gives the boundary; the p-values are then checked as `binomtest` computes them, since
    floating point can put the quantile one off."""
    wins = np.minimum(binom.ppf(1.0 - alpha, discordant, 0.5).astype(int) + 1, discordant + 1)
    while (short := (wins <= discordant) & (binom.sf(wins - 1, discordant, 0.5) > alpha)).any():
        wins[short] += 1
    while (spare := (wins >= 1) & (binom.sf(wins - 2, discordant, 0.5) <= alpha)).any():
        wins[spare] -= 1
    return wins


def mcnemar_power(n: int, gain: float, alpha: float, losses: float = FLIP_SHARE) -> float:
    """Power of the exact one-sided McNemar test on n paired examples when the new prompt loses a share
    `losses` of them and wins a share `losses + gain` (its accuracy is `gain` higher).

    The counts (wins W, losses L, ties) are multinomial; D = W + L ~ Bin(n, 2·losses + gain) and, given
    D = m, W ~ Bin(m, (losses + gain) / (2·losses + gain)). The power sums exactly over m:
    Σ_m P(D = m) · P(W >= w*(m) | D = m), w*(m) the fewest wins the test confirms among m (`_critical_wins`).
    """
    return _power_given(_critical_wins(np.arange(n + 1), alpha), gain, losses)


def _power_given(critical_wins: np.ndarray, gain: float, losses: float) -> float:
    """`mcnemar_power` with the critical wins of every discordant count 0..n worked out once (a root search
    asks for the power at many gains)."""
    discordant_share = 2.0 * losses + gain
    if discordant_share <= 0.0:
        return 0.0
    discordant = np.arange(critical_wins.size)
    return float(np.sum(binom.pmf(discordant, discordant.size - 1, discordant_share)
                        * binom.sf(critical_wins - 1, discordant, (losses + gain) / discordant_share)))


def smallest_confirmable_gain(n: int, alpha: float, baseline_accuracy: float | None = None,
                              power: float = TARGET_POWER, flip: float = FLIP_SHARE) -> float | None:
    """The smallest accuracy gain (a share: 0.05 is 5 points) that a test split of n examples confirms
    with probability `power`, by the exact one-sided McNemar test at `alpha`; None where no gain fits.

    Model: a share `flip` of the examples flip against the new prompt (baseline right, new prompt wrong)
    and a share `flip + gain` flip for it, independently per example (`mcnemar_power`). Power rises with
    the gain (a tie turned into a win never raises the test's p), so the gain at `power` is one root.
    The baseline's accuracy a only bounds what can flip: losses come from its right answers (a share
    min(flip, a)), wins from its wrong ones (gain <= 1 - a - losses). Unknown before a run, it is then
    left out: the gain is bounded only by wins + losses <= 1.
    """
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    losses = flip if baseline_accuracy is None else min(flip, baseline_accuracy)
    room = 1.0 - 2.0 * losses if baseline_accuracy is None else 1.0 - baseline_accuracy - losses
    critical_wins = _critical_wins(np.arange(n + 1), alpha)
    if room <= 0.0 or _power_given(critical_wins, room, losses) < power:
        return None
    return float(brentq(lambda gain: _power_given(critical_wins, gain, losses) - power, 0.0, room, xtol=1e-6))


def in_points(gain: float) -> float:
    """An accuracy gain (a share) in points to one decimal, rounded up: a figure of the gain a test split
    confirms then never claims a smaller gain than it needs."""
    return math.ceil(round(gain * 1000, 6)) / 10


def examples_for_gain(gain: float, alpha: float, power: float = TARGET_POWER, flip: float = FLIP_SHARE) -> int:
    """About how many test examples confirm `gain` with probability `power` (`mcnemar_power`): found by
    doubling then bisecting n. A discrete test's power zigzags slightly with n, so this is the size where
    the power first crosses `power` along the bisection, not a guarantee for every larger n."""
    if not 0.0 < gain <= 1.0 - 2.0 * flip or not 0.0 < alpha < 1.0:  # else no n reaches the power
        raise ValueError(f"need 0 < gain <= {1.0 - 2.0 * flip:g} and 0 < alpha < 1, got gain {gain}, alpha {alpha}")
    low, high = 1, 2
    while mcnemar_power(high, gain, alpha, flip) < power:
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if mcnemar_power(middle, gain, alpha, flip) >= power else (middle, high)
    return high


def accuracy_sigma(acc: float, n: int) -> float:
    """Binomial standard error of an accuracy measured on n examples."""
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    return math.sqrt(acc * (1.0 - acc) / n)


def selection_bias_scale(sigma: float, n_candidates: int) -> float:
    """How much picking the best of F equally good candidates inflates its score.

    The expected maximum of F independent N(mu, sigma^2) scores is at most
    mu + sigma * sqrt(2 ln F), and approaches that bound as F grows (a standard
    Gaussian extreme-value result). A dev-set "win" smaller than this scale is
    what noise alone would produce; with one candidate there is no selection.
    """
    if n_candidates <= 1:
        return 0.0
    return sigma * math.sqrt(2.0 * math.log(n_candidates))


@dataclass(frozen=True)
class Decision:
    """Outcome of one look at the paired evidence."""

    verdict: Verdict
    comparison: PairedComparison
    n: int
    p_value: float  # exact one-sided McNemar p on all paired examples so far
    threshold: float  # the alpha this look could spend


def obrien_fleming_spent(alpha: float, fraction: float) -> float:
    """Alpha spent by information fraction t (Lan-DeMets O'Brien-Fleming type): 2 - 2 Phi(z_{1-a/2} / sqrt t).

    Early looks get almost nothing, the last look nearly all of alpha, so staging costs little
    power at the full sample while still stopping clear wins early.
    """
    if fraction <= 0.0:
        return 0.0
    fraction = min(fraction, 1.0)
    return float(2.0 * (1.0 - norm.cdf(norm.ppf(1.0 - alpha / 2.0) / math.sqrt(fraction))))


@dataclass(frozen=True)
class AcceptRule:
    """Staged, paired accept rule for replacing an incumbent prompt with a candidate.

    Evidence is gathered in stages of paired examples (cumulative sizes in `stages`, capped by
    the examples available). At each look the candidate is accepted when the exact one-sided
    McNemar test (binomial on discordant pairs, H1: candidate better) on all examples so far
    gives p below that look's share of the challenge's alpha. Shares follow an O'Brien-Fleming
    spending function of the information fraction n / n_max and are added up across looks
    (Bonferroni), so one challenge falsely accepts with probability at most its alpha.

    `alpha` is the family-wise level of a whole *sweep* of challenges; the search driver gives
    each challenge alpha / (planned challenges in its sweep), so the chance that a sweep accepts
    any equally good candidate stays at most `alpha`.

    Futility (budget saving): at a non-final look the candidate is rejected early when it trails
    by more than `futility_margin` in accuracy AND the exact one-sided p for "candidate worse" is
    below `futility_p`. Futility stops only turn accepts into rejects, so they never raise the
    false-accept rate; `futility_p = 0` disables them. At the last look anything not accepted
    is rejected.
    """

    stages: tuple[int, ...] = (50, 100, 200, 400)
    alpha: float = 0.10
    futility_margin: float = 0.0
    futility_p: float = 0.2

    def __post_init__(self) -> None:
        if not self.stages or any(s <= 0 for s in self.stages):
            raise ValueError(f"stages must be positive sizes, got {self.stages}")
        if list(self.stages) != sorted(set(self.stages)):
            raise ValueError(f"stages must be strictly increasing, got {self.stages}")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")

    def looks(self, n_max: int) -> list[int]:
        """Cumulative sizes of the looks when `n_max` paired examples are available."""
        last = min(n_max, self.stages[-1])
        return [s for s in self.stages if s < last] + [last]

    def look_alpha(self, n: int, n_max: int, alpha: float) -> float:
        """The share of a challenge's `alpha` spent at the look with n examples."""
        looks = self.looks(n_max)
        if n not in looks:
            raise ValueError(f"{n} is not a look of {looks}")
        previous = looks[looks.index(n) - 1] if looks.index(n) else 0
        return obrien_fleming_spent(alpha, n / looks[-1]) - obrien_fleming_spent(alpha, previous / looks[-1])

    def next_n(self, current_n: int, n_max: int) -> int | None:
        """Cumulative number of paired examples for the next look; None after the last one."""
        return next((s for s in self.looks(n_max) if s > current_n), None)

    def _is_futile(self, comparison: PairedComparison) -> bool:
        p_worse = _one_sided_p(comparison.c, comparison.b)
        return comparison.diff < -self.futility_margin and p_worse < self.futility_p

    def decide(self, candidate_correct: Sequence[bool], incumbent_correct: Sequence[bool],
               n_max: int, alpha: float | None = None) -> Decision:
        """Judge one candidate at the look with len(candidate_correct) paired examples.

        `alpha` is this challenge's level (default: the rule's whole alpha, a sweep of one).
        """
        comparison = paired_compare(candidate_correct, incumbent_correct)
        last = comparison.n >= self.looks(n_max)[-1]
        threshold = self.look_alpha(comparison.n, n_max, self.alpha if alpha is None else alpha)
        if comparison.p_one_sided < threshold:
            verdict: Verdict = "accept"
        elif last or self._is_futile(comparison):
            verdict = "reject"
        else:
            verdict = "continue"
        return Decision(verdict, comparison, comparison.n, comparison.p_one_sided, threshold)


def keep_any_win(candidate_correct: Sequence[bool], incumbent_correct: Sequence[bool]) -> bool:
    """The naive rule "keep the candidate if it scored higher"; kept only to measure how often it accepts noise."""
    cand, inc = _paired_arrays(candidate_correct, incumbent_correct)
    return bool(cand.mean() > inc.mean())


def t_interval(values: list[float], bounds: tuple[float, float], alpha: float = 0.05) -> tuple[float, float]:
    """Student-t interval for the mean over seeds (two or more), clipped to the possible range:
    with few seeds the t quantile is large (12.7 for two) and the raw interval overshoots."""
    centre = float(np.mean(values))
    spread = float(sem(values))
    if spread == 0.0:
        return (centre, centre)
    low, high = student_t.interval(1 - alpha, len(values) - 1, loc=centre, scale=spread)
    return (max(float(low), bounds[0]), min(float(high), bounds[1]))
