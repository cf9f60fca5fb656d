"""Statistics over seeds, each seed its own data draw: the paired t (two- and one-sided), the exact sign-flip
permutation test, the stratified (Cochran-Mantel-Haenszel) odds test, Benjamini-Hochberg over a family with
undefined members, the pre-registered claims of a headline run, and how reports print a p-value at the float
floor. Comparisons (`prompttune.comparing.summary`) and the headline script apply them."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy import stats
from statsmodels.stats.contingency_tables import StratifiedTable

from prompttune.statistics.stats import adjust_pvalues

P_FLOOR = float(np.finfo(float).tiny)  # 2.2e-308
"""The smallest p a float holds at full precision: a p under it is reported as a bound ("< 2.23e-308"), never 0."""


def paired_t(diffs: list[float]) -> float | None:
    """Two-sided paired t-test p; None when the differences have no spread (the t statistic is undefined)."""
    if len(set(diffs)) == 1:
        return None
    return float(stats.ttest_1samp(diffs, 0.0).pvalue)


def sign_flip_p(diffs: list[float]) -> float:
    """Exact two-sided sign-flip permutation p: the share of the 2^n sign patterns whose mean is at
    least as far from 0 as the observed one (the observed pattern included, so never 0)."""
    observed = abs(sum(diffs))
    flips = [abs(sum(s * d for s, d in zip(signs, diffs))) for signs in itertools.product((1, -1), repeat=len(diffs))]
    return sum(f >= observed - 1e-12 for f in flips) / len(flips)


def stratified_odds_p(tables: list[np.ndarray]) -> float | None:
    """Cochran-Mantel-Haenszel test of equal odds over 2x2 tables (one per stratum); None with fewer than two
    tables or every table degenerate. The p is the chi-square survival function of statsmodels' statistic: its
    own `1 - cdf` is 0 below about 1e-16."""
    if len(tables) < 2 or all(t[:, 0].sum() in (0, t.sum()) for t in tables):
        return None
    statistic = StratifiedTable(tables).test_null_odds(correction=True).statistic
    # Only a statistic above ~1400 underflows sf; P_FLOOR then stands for "below it", printed as a bound.
    return max(float(stats.chi2.sf(statistic, 1)), P_FLOOR)


def bh_defined(values: list[float | None]) -> list[float | None]:
    """BH over the defined p-values of a family; undefined ones stay None."""
    defined = [p for p in values if p is not None]
    adjusted = iter(adjust_pvalues(defined, method="fdr_bh")[1] if defined else [])
    return [None if p is None else float(next(adjusted)) for p in values]


@dataclass
class Claim:
    """One pre-registered claim of a headline run: on `task`, arm `first` beats arm `second` by more than
    `margin` in test accuracy, tested one-sided by a paired t over the per-seed differences."""

    task: str
    first: str
    second: str
    margin: float
    diffs: list[float]  # first − second, one per seed (each seed its own data draw)
    p: float | None = None
    p_bh: float | None = None

    @property
    def name(self) -> str:
        return f"{self.task}: {self.first} − {self.second} > {self.margin:g}"


def one_sided_t(diffs: list[float], margin: float = 0.0) -> float | None:
    """p of a one-sided paired t-test that the mean difference exceeds `margin`; None with no spread to test."""
    if len(diffs) < 2 or len(set(diffs)) == 1:
        return None
    return max(float(stats.ttest_1samp(diffs, margin, alternative="greater").pvalue), P_FLOOR)


def judge_claims(claims: list[Claim]) -> list[Claim]:
    """Every claim's one-sided t p, Benjamini–Hochberg-corrected across all of them (the headline's one family:
    every task's primary and secondary claims together); a claim with no spread stays untested (None)."""
    for claim in claims:
        claim.p = one_sided_t(claim.diffs, claim.margin)
    for claim, p_bh in zip(claims, bh_defined([claim.p for claim in claims])):
        claim.p_bh = p_bh
    return claims


def p_text(p: float) -> str:
    """A p-value as reports print it: three figures, or the bound it stands for at the float floor."""
    return f"< {P_FLOOR:.3g}" if p <= P_FLOOR else f"{p:.3g}"
