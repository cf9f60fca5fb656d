"""The numbers of a comparison: per-arm test accuracy over seeds, gains, corrected p-values,
spend, and paired tests between the leading arms on the same test examples."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean

import numpy as np
from scipy import stats

from prompttune.compare.arms import ArmRun
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


@dataclass
class ArmSummary:
    arm: str
    runs: list[ArmRun]
    accuracy: float
    accuracy_ci: tuple[float, float]
    gain: float
    gain_ci: tuple[float, float]
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


def summarize(runs: list[ArmRun], arms: list[str], seeds: list[int]) -> list[ArmSummary]:
    """Per arm, in the order given; McNemar p vs baseline BH-corrected across arms within a seed."""
    by_arm = {arm: sorted((r for r in runs if r.arm == arm), key=lambda r: r.seed) for arm in arms}
    corrected: dict[tuple[str, int], float] = {}
    for seed in seeds:
        family = [r for arm in arms for r in by_arm[arm] if r.seed == seed]
        _, adjusted = adjust_pvalues([r.confirmation.comparison.p_two_sided for r in family], method="fdr_bh")
        corrected.update({(r.arm, seed): p for r, p in zip(family, adjusted)})
    summaries = []
    for arm, arm_runs in by_arm.items():
        accs = [r.confirmation.best_accuracy for r in arm_runs]
        gains = [r.confirmation.gain for r in arm_runs]
        if len(arm_runs) >= 2:
            acc_ci, gain_ci = t_interval(accs, (0.0, 1.0)), t_interval(gains, (-1.0, 1.0))
            kind = "Student-t over seeds, clipped to the possible range"
        else:
            c = arm_runs[0].confirmation
            acc_ci, gain_ci, kind = c.best_ci, c.gain_ci, "one seed: Wilson / paired bootstrap"
        summaries.append(ArmSummary(arm, arm_runs, mean(accs), acc_ci, mean(gains), gain_ci, kind,
                                    [corrected[(arm, r.seed)] for r in arm_runs]))
    return summaries


def pairwise(summaries: list[ArmSummary]) -> list[PairTest]:
    """Exact McNemar between each pair of the leading arms, seed by seed (both prompts on the
    same test examples), BH-corrected over all these tests."""
    top = sorted(summaries, key=lambda s: -s.accuracy)[:TOP_ARMS]
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
