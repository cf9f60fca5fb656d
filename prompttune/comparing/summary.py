"""The numbers of a comparison: per-arm test accuracy over seeds under both keep rules (raw and
guarded), gains, corrected p-values, tests between arms across seeds (each seed its own data
draw: a paired t-test and an exact sign-flip permutation test on the per-seed differences, and a
Cochran-Mantel-Haenszel test on the pooled test examples stratified by seed, descriptive only), McNemar
tests between the leading arms on the same test examples; the tests themselves are in
`prompttune.statistics.seeds`."""

from __future__ import annotations

from statistics import mean

import numpy as np

from prompttune.results.arms import ArmRun
from prompttune.results.compare import ArmSummary, PairTest, Scores, SeedPair
from prompttune.scoring.confirmation import Confirmation
from prompttune.statistics.seeds import bh_defined, paired_t, sign_flip_p, stratified_odds_p
from prompttune.statistics.stats import adjust_pvalues, paired_compare, t_interval

TOP_ARMS = 3
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


def cmh_p(first: list[ArmRun], second: list[ArmRun]) -> float | None:
    """Cochran-Mantel-Haenszel test that the odds of a right answer are equal for the two arms' shipped
    prompts, pooled over their seeds' test examples with one 2x2 table per seed (`CMH_LABEL`); None
    when a table is degenerate (an arm right or wrong everywhere on every seed)."""
    theirs = {r.seed: r for r in second}
    tables = []
    for mine in first:
        if mine.seed in theirs and mine.test_correct:
            a, b = sum(mine.test_correct), sum(theirs[mine.seed].test_correct)
            tables.append(np.array([[a, len(mine.test_correct) - a], [b, len(theirs[mine.seed].test_correct) - b]]))
    return stratified_odds_p(tables)


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
                                       t_interval(diffs, (-1.0, 1.0)), paired_t(diffs), sign_flip_p(diffs),
                                       cmh_p(first.runs, second.runs) if keep == "guarded" else None))
        for test, p, p_perm, p_cmh in zip(family, bh_defined([t.p for t in family]), bh_defined([t.p_perm for t in family]),
                                          bh_defined([t.p_cmh for t in family])):
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


