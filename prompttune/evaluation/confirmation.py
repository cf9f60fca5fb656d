"""Held-out confirmation: baseline and winner on the test split no optimizer ever touched."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from prompttune.evaluation.evaluator import Evaluator
from prompttune.objectives.stats import PairedComparison, paired_bootstrap_ci, paired_compare, wilson_ci
from prompttune.search_spaces.space import Candidate


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


def confirm(baseline: Candidate, best: Candidate, test_evaluator: Evaluator,
            test_ids: list[str], seed: int = 0) -> Confirmation:
    """Score both prompts on identical test examples; the paired test decides if the gain is real."""
    calls_before = test_evaluator.ledger.calls
    base = [r.correct for r in test_evaluator.evaluate(baseline.spec, test_ids)]
    cand = [r.correct for r in test_evaluator.evaluate(best.spec, test_ids)]
    n = len(test_ids)
    return Confirmation(
        n=n,
        baseline_accuracy=sum(base) / n,
        baseline_ci=wilson_ci(sum(base), n),
        best_accuracy=sum(cand) / n,
        best_ci=wilson_ci(sum(cand), n),
        gain=(sum(cand) - sum(base)) / n,
        gain_ci=paired_bootstrap_ci(cand, base, seed=seed),
        comparison=paired_compare(cand, base),
        calls=test_evaluator.ledger.calls - calls_before,
    )
