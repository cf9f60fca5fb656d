"""The numbers of a comparison: per-arm test accuracy over seeds under both keep rules (raw and
guarded), gains, corrected p-values, paired t-tests between arms across seeds, and McNemar tests
between the leading arms on the same test examples."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean

import numpy as np
from scipy import stats

from prompttune.comparing.arms import ArmRun
from prompttune.evaluation.confirmation import Confirmation
from prompttune.objectives.stats import PairedComparison, adjust_pvalues, paired_compare

TOP_ARMS = 3


def t_interval(values: list[float], bounds: tuple[float, float], alpha: float = 0.05) -> tuple[float, float]:
    """Student-t interval for the mean over seeds (two or more), clipped to the possible range:
    with few seeds the t quantile is large (12.7 for two) and the raw interval overshoots."""
    centre = float(np.mean(values))
    sem = float(stats.sem(values))
    if sem == 0.0:
        return (centre, centre)
    low, high = stats.t.interval(1 - alpha, len(values) - 1, loc=centre, scale=sem)
    return (max(float(low), bounds[0]), min(float(high), bounds[1]))


KEEP_RULES = {"guarded": "after the verdict protocol: the raw pick if confirmed on test, else the baseline",
              "raw": "the arm's own pick: the dev winner, or DSPy's best program"}


@dataclass
class Scores:
    """Test accuracy and gain over the baseline under one keep rule, as a mean over seeds with a 95% CI."""

    accuracy: float
    accuracy_ci: tuple[float, float]
    gain: float
    gain_ci: tuple[float, float]


def _confirmation_under(run: ArmRun, keep: str) -> Confirmation:
    """The run's test figures under a keep rule (see KEEP_RULES)."""
    return run.confirmation if keep == "guarded" else run.raw_confirmation


@dataclass
class ArmSummary:
    arm: str
    runs: list[ArmRun]
    guarded: Scores
    raw: Scores
    interval: str
    p_bh: list[float]

    @property
    def significant(self) -> int:
        """Seeds whose gain is positive and significant after the correction."""
        return sum(p < 0.05 and r.confirmation.gain > 0 for p, r in zip(self.p_bh, self.runs))


@dataclass
class PairTest:
    first: str
    second: str
    seed: int
    comparison: PairedComparison
    p_bh: float = 1.0


@dataclass
class SeedPair:
    """Two arms across the seeds they share (same task draw, same test split): the mean of the
    per-seed differences in test accuracy (first − second), its t-interval and a paired t-test."""

    first: str
    second: str
    keep: str
    seeds: int
    mean_diff: float
    diff_ci: tuple[float, float]
    p: float
    p_bh: float = 1.0


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


def _paired_t(diffs: list[float]) -> float:
    """Two-sided paired t-test p; the same difference at every seed is the test's limit (0, or 1 when none)."""
    if len(set(diffs)) == 1:
        return 1.0 if diffs[0] == 0 else 0.0
    return float(stats.ttest_1samp(diffs, 0.0).pvalue)


def seed_pairs(summaries: list[ArmSummary]) -> list[SeedPair]:
    """Every pair of arms under each keep rule, over the seeds both ran (two or more), BH-corrected
    over the pairs of one keep rule. A t-test, not Wilcoxon's signed-rank test: with five seeds the
    smallest two-sided p the latter can reach is 0.0625."""
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
                                       t_interval(diffs, (-1.0, 1.0)), _paired_t(diffs)))
        _, adjusted = adjust_pvalues([t.p for t in family], method="fdr_bh")
        for test, p in zip(family, adjusted):
            test.p_bh = p
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
