"""The numbers of a comparison: per-arm test accuracy over seeds under both keep rules (raw and
guarded), gains, corrected p-values, tests between arms across seeds (each seed its own data
draw: a paired t-test and an exact sign-flip permutation test on the per-seed differences, and a
Cochran-Mantel-Haenszel test on the pooled test examples stratified by seed, descriptive only), McNemar
tests between the leading arms on the same test examples, and the pre-registered claims of a headline run
(one-sided paired t over seeds, BH across every claim)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from statistics import mean

import numpy as np
from scipy import stats
from statsmodels.stats.contingency_tables import StratifiedTable

from prompttune.evaluation.confirmation import Confirmation
from prompttune.objectives.stats import adjust_pvalues, paired_compare, t_interval
from prompttune.results.arms import ArmRun
from prompttune.results.compare import ArmSummary, PairTest, Scores, SeedPair

TOP_ARMS = 3
P_FLOOR = float(np.finfo(float).tiny)  # 2.2e-308
"""The smallest p a float holds at full precision: a p under it is reported as a bound ("< 2.23e-308"), never 0."""
CMH_LABEL = "descriptive: pooled examples, prompts fixed"
"""What the CMH test can say: it treats each seed's shipped prompts as fixed and their answers as independent
examples, so it describes those prompts, not the optimizers (optimizer-level claims use the across-seed tests)."""


KEEP_RULES = {"guarded": "after the verdict protocol: the raw pick if confirmed on test, else the baseline",
              "raw": "the arm's own pick: the dev winner, or DSPy's best program"}


def _confirmation_under(run: ArmRun, keep: str) -> Confirmation:
    """The run's test figures under a keep rule (see KEEP_RULES)."""
    return run.confirmation if keep == "guarded" else run.raw_confirmation


def _scores(confirmations: list[Confirmation]) -> tuple[Scores, str]:
    accs = [c.best_accuracy for c in confirmations]
    gains = [c.gain for c in confirmations]
    if len(confirmations) >= 2:
        return (Scores(mean(accs), t_interval(accs, (0.0, 1.0)), mean(gains), t_interval(gains, (-1.0, 1.0))),
                "Student-t over seeds, clipped to the possible range")
    c = confirmations[0]
    return Scores(c.best_accuracy, c.best_ci, c.gain, c.gain_ci), "one seed: Wilson / paired bootstrap"


def summarize(runs: list[ArmRun], arms: list[str], seeds: list[int]) -> list[ArmSummary]:
    """Per arm, in the order given, under both keep rules; McNemar p of what ships vs the baseline,
    BH-corrected across arms within a seed."""
    by_arm = {arm: sorted((r for r in runs if r.arm == arm), key=lambda r: r.seed) for arm in arms}
    corrected: dict[tuple[str, int], float] = {}
    for seed in seeds:
        family = [r for arm in arms for r in by_arm[arm] if r.seed == seed]
        _, adjusted = adjust_pvalues([r.confirmation.comparison.p_two_sided for r in family], method="fdr_bh")
        corrected.update({(r.arm, seed): p for r, p in zip(family, adjusted)})
    summaries = []
    for arm, arm_runs in by_arm.items():
        guarded, interval = _scores([r.confirmation for r in arm_runs])
        raw, _ = _scores([r.raw_confirmation for r in arm_runs])
        summaries.append(ArmSummary(arm, arm_runs, guarded, raw, interval,
                                    [corrected[(arm, r.seed)] for r in arm_runs]))
    return summaries


def _correct(confirmation: Confirmation) -> int:
    """Test examples right, as a count: differences of counts are exact, so equal gaps compare equal."""
    return round(confirmation.best_accuracy * confirmation.n)


def _paired_t(diffs: list[float]) -> float | None:
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


def cmh_p(first: list[ArmRun], second: list[ArmRun]) -> float | None:
    """Cochran-Mantel-Haenszel test that the odds of a right answer are equal for the two arms' shipped
    prompts, pooled over their seeds' test examples with one 2x2 table per seed (`CMH_LABEL`); None
    when a table is degenerate (an arm right or wrong everywhere on every seed). The p is the chi-square
    survival function of statsmodels' statistic: its own `1 - cdf` is 0 below about 1e-16."""
    theirs = {r.seed: r for r in second}
    tables = []
    for mine in first:
        if mine.seed in theirs and mine.test_correct:
            a, b = sum(mine.test_correct), sum(theirs[mine.seed].test_correct)
            tables.append(np.array([[a, len(mine.test_correct) - a], [b, len(theirs[mine.seed].test_correct) - b]]))
    if len(tables) < 2 or all(t[:, 0].sum() in (0, t.sum()) for t in tables):
        return None
    statistic = StratifiedTable(tables).test_null_odds(correction=True).statistic
    # Only a statistic above ~1400 underflows sf; P_FLOOR then stands for "below it", printed as a bound.
    return max(float(stats.chi2.sf(statistic, 1)), P_FLOOR)


def _bh(values: list[float | None]) -> list[float | None]:
    """BH over the defined p-values of a family; undefined ones stay None."""
    defined = [p for p in values if p is not None]
    adjusted = iter(adjust_pvalues(defined, method="fdr_bh")[1] if defined else [])
    return [None if p is None else float(next(adjusted)) for p in values]


def seed_pairs(summaries: list[ArmSummary]) -> list[SeedPair]:
    """Every pair of arms under each keep rule, over the seeds both ran (two or more), BH-corrected
    over the pairs of one keep rule. With five seeds the permutation test cannot go below 0.0625:
    the t-test assumes normal per-seed differences to say more, the CMH test pools the examples."""
    tests = []
    for keep in KEEP_RULES:
        family = []
        for i, first in enumerate(summaries):
            for second in summaries[i + 1:]:
                theirs = {r.seed: _confirmation_under(r, keep) for r in second.runs}
                pairs = [(_confirmation_under(r, keep), theirs[r.seed]) for r in first.runs if r.seed in theirs]
                if len(pairs) < 2:
                    continue
                diffs = [(_correct(a) - _correct(b)) / a.n for a, b in pairs]
                family.append(SeedPair(first.arm, second.arm, keep, len(pairs), mean(diffs),
                                       t_interval(diffs, (-1.0, 1.0)), _paired_t(diffs), sign_flip_p(diffs),
                                       cmh_p(first.runs, second.runs) if keep == "guarded" else None))
        for test, p, p_perm, p_cmh in zip(family, _bh([t.p for t in family]), _bh([t.p_perm for t in family]),
                                          _bh([t.p_cmh for t in family])):
            test.p_bh, test.p_perm_bh, test.p_cmh_bh = p, float(p_perm), p_cmh
        tests += family
    return tests


def pairwise(summaries: list[ArmSummary]) -> list[PairTest]:
    """Exact McNemar between each pair of the leading arms, seed by seed (both prompts on the
    same test examples), BH-corrected over all these tests."""
    top = sorted(summaries, key=lambda s: -s.guarded.accuracy)[:TOP_ARMS]
    tests = []
    for i, first in enumerate(top):
        for second in top[i + 1:]:
            pairs = {r.seed: r for r in second.runs}
            tests += [PairTest(first.arm, second.arm, r.seed,
                               paired_compare(r.test_correct, pairs[r.seed].test_correct))
                      for r in first.runs if r.seed in pairs]
    _, adjusted = adjust_pvalues([t.comparison.p_two_sided for t in tests], method="fdr_bh")
    for test, p in zip(tests, adjusted):
        test.p_bh = p
    return tests


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
    for claim, p_bh in zip(claims, _bh([claim.p for claim in claims])):
        claim.p_bh = p_bh
    return claims


def p_text(p: float) -> str:
    """A p-value as reports print it: three figures, or the bound it stands for at the float floor."""
    return f"< {P_FLOOR:.3g}" if p <= P_FLOOR else f"{p:.3g}"
