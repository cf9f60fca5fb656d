"""Held-out verdict: the one rule that decides, for every optimizer, what ships.

Dev is for selection; the test split, which no optimizer ever touched, decides. The selected
prompt (or the top K of the dev ranking, with Holm over K) is tested against the baseline on the
same test examples with one exact one-sided McNemar test at alpha. What ships is the confirmed
prompt, or the baseline when nothing is confirmed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

from prompttune.core.types import Record
from prompttune.scoring.evaluator import Evaluator
from prompttune.search_spaces.space import Candidate
from prompttune.statistics.stats import PairedComparison, adjust_pvalues, paired_bootstrap_ci, paired_compare, wilson_ci


@dataclass
class Confirmation:
    n: int
    baseline_accuracy: float
    baseline_ci: tuple[float, float]
    best_accuracy: float
    best_ci: tuple[float, float]
    gain: float
    gain_ci: tuple[float, float]
    comparison: PairedComparison
    calls: int

    def to_dict(self) -> dict:
        return asdict(self)


def paired_confirmation(cand: list[bool], base: list[bool], calls: int, seed: int = 0) -> Confirmation:
    """Accuracies with Wilson CIs, the gain with a paired bootstrap CI, and the exact tests."""
    n = len(cand)
    return Confirmation(
        n=n,
        baseline_accuracy=sum(base) / n,
        baseline_ci=wilson_ci(sum(base), n),
        best_accuracy=sum(cand) / n,
        best_ci=wilson_ci(sum(cand), n),
        gain=(sum(cand) - sum(base)) / n,
        gain_ci=paired_bootstrap_ci(cand, base, seed=seed),
        comparison=paired_compare(cand, base),
        calls=calls,
    )


@dataclass
class Tested:
    """One dev candidate tested against the baseline on test."""

    candidate: Candidate
    confirmation: Confirmation
    p_adjusted: float  # one-sided exact McNemar, Holm over the K tested
    confirmed: bool


@dataclass
class Verdict:
    alpha: float
    top_k: int
    dev_winner: Candidate
    baseline: Candidate
    tested: list[Tested]
    baseline_only: Confirmation  # the baseline on test (what ships when nothing is confirmed)
    records: dict[str, list[Record]] = field(default_factory=dict)  # candidate id -> its test records

    @property
    def confirmed(self) -> Tested | None:
        """The highest-ranked confirmed candidate on dev, if any."""
        return next((t for t in self.tested if t.confirmed), None)

    @property
    def test_ids(self) -> tuple[str, ...]:
        """The test examples this verdict scored (the baseline is scored on every one of them)."""
        return tuple(r.example_id for r in self.records[self.baseline.id])

    @property
    def shipped(self) -> Candidate:
        return self.confirmed.candidate if self.confirmed else self.baseline

    @property
    def shipped_confirmation(self) -> Confirmation:
        """Test figures of what ships against the baseline (gain 0 when the baseline ships)."""
        return self.confirmed.confirmation if self.confirmed else self.baseline_only

    @property
    def leader_confirmation(self) -> Confirmation:
        """Test figures of the dev winner (the baseline's own when it won on dev)."""
        return self.tested[0].confirmation if self.tested else self.baseline_only

    def summary(self) -> str:
        """One line: what was decided and why."""
        holm = f", Holm over {len(self.tested)}" if len(self.tested) > 1 else ""
        if not self.tested:
            return "baseline kept: no candidate scored above the baseline on dev, so nothing was tested"
        if (won := self.confirmed) is not None:
            return (f"confirmed: the selected prompt beats the baseline on the held-out test (exact one-sided "
                    f"McNemar p = {won.p_adjusted:.3g} < α = {self.alpha}{holm}); it ships")
        best = min(self.tested, key=lambda t: t.p_adjusted)
        return (f"not confirmed: no dev candidate beats the baseline on the held-out test (exact one-sided "
                f"McNemar p = {best.p_adjusted:.3g} ≥ α = {self.alpha}{holm}); the baseline ships")


def held_out_verdict(baseline: Candidate, ranking: Sequence[Candidate], test_evaluator: Evaluator,
                     test_ids: list[str], alpha: float = 0.05, top_k: int = 1, seed: int = 0) -> Verdict:
    """Test the top K of the dev ranking (the baseline counts as one of them) against the baseline.

    The baseline is always scored on test, so the report shows its accuracy even when nothing
    is tested. With K > 1 the p-values are Holm-adjusted and the first confirmed in dev order ships.
    """
    calls_before = test_evaluator.ledger.calls
    contenders = [c for c in list(ranking)[:top_k] if c.id != baseline.id]
    test_evaluator.prefetch([(c.spec, test_ids) for c in (baseline, *contenders)])  # one backend call for all
    records = {baseline.id: test_evaluator.evaluate(baseline.spec, test_ids)}
    base = [r.correct for r in records[baseline.id]]
    baseline_only = paired_confirmation(base, base, test_evaluator.ledger.calls - calls_before, seed)
    confirmations = []
    for candidate in contenders:
        before = test_evaluator.ledger.calls
        records[candidate.id] = test_evaluator.evaluate(candidate.spec, test_ids)
        cand = [r.correct for r in records[candidate.id]]
        confirmations.append(paired_confirmation(cand, base, test_evaluator.ledger.calls - before, seed))
    reject, adjusted = adjust_pvalues([c.comparison.p_one_sided for c in confirmations], "holm", alpha)
    tested = [Tested(c, conf, p, ok) for c, conf, p, ok in zip(contenders, confirmations, adjusted, reject)]
    dev_winner = ranking[0] if ranking else baseline
    return Verdict(alpha, top_k, dev_winner, baseline, tested, baseline_only, records)
