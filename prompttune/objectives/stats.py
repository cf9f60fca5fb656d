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
from scipy.stats import binomtest
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
    reject, corrected, _, _ = multipletests(list(pvalues), alpha=alpha, method=method)
    return ([bool(r) for r in reject], [float(p) for p in corrected])


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
    p_value: float  # the p the verdict used (one-sided; Holm-adjusted in a Holm sweep)


@dataclass(frozen=True)
class AcceptRule:
    """Staged, paired accept rule for replacing an incumbent prompt with a candidate.

    Evidence is gathered in stages of paired examples (cumulative sizes in
    `stages`). At every look the candidate is accepted only when the exact
    one-sided McNemar test (binomial on discordant pairs, H1: candidate better)
    on all examples so far gives p < alpha / len(stages).

    Why the split: testing every look at the full alpha lets noise win at any
    of the looks; with four stages an equally good candidate was accepted about
    10% of the time in simulation. Splitting alpha over the looks (Bonferroni)
    bounds the false-accept chance of the whole staged procedure by alpha.

    Futility (budget saving): at a non-final look the candidate is rejected
    early when it trails by more than `futility_margin` in accuracy AND the
    exact one-sided p for "candidate worse" is below `futility_p`. With
    futility_p = 0.2 a candidate that merely trails by noise keeps being
    evaluated, while one clearly behind stops at the first look; setting
    futility_p = 0 disables early rejection. Futility stops can only turn
    accepts into rejects, so they never raise the false-accept rate.

    At the last stage (n >= stages[-1]) or when `final=True` (no more
    examples), anything not accepted is rejected.

    With `holm=True`, `decide_sweep` Holm-adjusts the one-sided p-values of a
    sweep of candidates, so the chance of accepting any noise candidate in the
    sweep stays at alpha.
    """

    stages: tuple[int, ...] = (50, 100, 200, 400)
    alpha: float = 0.05
    futility_margin: float = 0.0
    futility_p: float = 0.2
    holm: bool = False

    def __post_init__(self) -> None:
        if not self.stages or any(s <= 0 for s in self.stages):
            raise ValueError(f"stages must be positive sizes, got {self.stages}")
        if list(self.stages) != sorted(set(self.stages)):
            raise ValueError(f"stages must be strictly increasing, got {self.stages}")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")

    @property
    def look_alpha(self) -> float:
        """Significance level of each single look."""
        return self.alpha / len(self.stages)

    def next_n(self, current_n: int) -> int | None:
        """Cumulative number of paired examples for the next look; None after the last stage."""
        return next((s for s in self.stages if s > current_n), None)

    def _is_futile(self, comparison: PairedComparison) -> bool:
        p_worse = _one_sided_p(comparison.c, comparison.b)
        return comparison.diff < -self.futility_margin and p_worse < self.futility_p

    def _verdict(self, comparison: PairedComparison, p_value: float, final: bool) -> Decision:
        last = final or comparison.n >= self.stages[-1]
        if p_value < self.look_alpha:
            verdict: Verdict = "accept"
        elif last or self._is_futile(comparison):
            verdict = "reject"
        else:
            verdict = "continue"
        return Decision(verdict=verdict, comparison=comparison, n=comparison.n, p_value=p_value)

    def decide(
        self,
        candidate_correct: Sequence[bool],
        incumbent_correct: Sequence[bool],
        final: bool = False,
    ) -> Decision:
        """Judge one candidate on all paired examples seen so far."""
        comparison = paired_compare(candidate_correct, incumbent_correct)
        return self._verdict(comparison, comparison.p_one_sided, final)

    def decide_sweep(
        self,
        pairs: Sequence[tuple[Sequence[bool], Sequence[bool]]],
        final: bool = False,
    ) -> list[Decision]:
        """Judge several candidates at once, Holm-adjusting their p-values when `holm` is set."""
        comparisons = [paired_compare(cand, inc) for cand, inc in pairs]
        pvalues = [comp.p_one_sided for comp in comparisons]
        if self.holm:
            _, pvalues = adjust_pvalues(pvalues, method="holm", alpha=self.alpha)
        return [self._verdict(comp, p, final) for comp, p in zip(comparisons, pvalues)]


def keep_any_win(candidate_correct: Sequence[bool], incumbent_correct: Sequence[bool]) -> bool:
    """The naive rule "keep the candidate if it scored higher"; kept only to measure how often it accepts noise."""
    cand, inc = _paired_arrays(candidate_correct, incumbent_correct)
    return bool(cand.mean() > inc.mean())
