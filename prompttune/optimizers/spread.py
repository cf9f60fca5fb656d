"""FormatSpread (Sclar et al. 2024): Thompson sampling for the best and the worst format.

For sensitivity audits: within a budget it estimates how far apart the best and worst formats
of a space are. Arms are sampled formats; each pull scores an arm on its next batch of examples
from one shared order; Beta posteriors start from a prior centred on the baseline's accuracy.
The first half of the budget maximises, the second half minimises. The leader is the arm with
the highest posterior mean; the driver pairs it with the baseline and the held-out verdict decides.

Example, on the synthetic oracle (a test device, `prompttune.testing.OracleProblem`: a
prompt is better, 0.85 against 0.55, when its instruction says 'Pick' or it carries 2+ demos)::

    >>> from prompttune.testing import OracleProblem
    >>> import prompttune
    >>> problem = OracleProblem.colours()
    >>> run = prompttune.optimize(problem.task, optimizer="spread", budget=600, options={"formats": 12},
    ...                           space=problem.space, backend=problem.backend, record=False)
    >>> summary = run.strategy.optimizer.spread_summary()
    >>> summary["best"].values(problem.space), summary["best_n"]
    ({'field': 'Input: {}', 'output': 'Label: {}', 'verb': 'Pick'}, 120)
    >>> summary["worst"].values(problem.space), summary["worst_n"]
    ({'field': 'Text: {}', 'output': 'Label: {}', 'verb': 'State'}, 40)
    >>> round(summary["spread"], 3), run.ledger.calls
    (0.458, 600)

On a real task (PROMPTTUNE_DATA_DIR=../shared/data; or from Python,
``prompttune.optimize("agnews", optimizer="spread", budget=2000, options={"formats": 20})``)::

    optimize --task agnews --optimizer spread --budget 2000 --option formats=20
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from prompttune.core.types import Record
from prompttune.optimizers.search_helpers import rank_by_score
from prompttune.optimizers.strategy_contract import Optimizer, OptimizerOptions, TrialRequest
from prompttune.search_spaces.space import Candidate


class SpreadOptions(OptimizerOptions):
    formats: int = Field(30, ge=2, description="formats (arms) sampled, the baseline included")
    batch: int = Field(20, ge=1, description="examples per pull")
    prior_strength: float = Field(5.0, ge=0, description="pulls' worth of the baseline-centred prior")



class FormatSpread(Optimizer):
    name = "spread"
    Options = SpreadOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arms = self.context.space.distinct_candidates(self.rng, self.options.formats, first=[self.baseline])
        self.alpha = np.ones(len(self.arms))
        self.beta = np.ones(len(self.arms))
        self.pulls = np.zeros(len(self.arms), dtype=int)
        self.spent = 0

    def _next_ids(self, arm: int) -> tuple[str, ...]:
        start = self.pulls[arm] * self.options.batch
        return tuple(self.context.dev_ids[start:start + self.options.batch])

    @property
    def phase(self) -> str:
        return "maximise" if self.spent < self.context.budget / 2 else "minimise"

    def ask(self) -> TrialRequest | None:
        if self.pulls[0] == 0:
            return TrialRequest(self.baseline, self._next_ids(0), "baseline")
        open_arms = [i for i in range(len(self.arms)) if self._next_ids(i)]
        if not open_arms:
            return None
        draws = self.rng.beta(self.alpha[open_arms], self.beta[open_arms])
        pick = open_arms[int(np.argmax(draws) if self.phase == "maximise" else np.argmin(draws))]
        return TrialRequest(self.arms[pick], self._next_ids(pick), self.phase)

    def tell(self, request: TrialRequest, records: list[Record]) -> dict[str, Any]:
        arm = next(i for i, a in enumerate(self.arms) if a.id == request.candidate.id)
        wins = sum(r.correct for r in records)
        if arm == 0 and self.pulls[0] == 0:
            # Prior for every arm: the baseline's first-batch accuracy, worth `prior_strength` pulls.
            rate = (wins + 1) / (len(records) + 2)
            self.alpha[:] = 1 + rate * self.options.prior_strength
            self.beta[:] = 1 + (1 - rate) * self.options.prior_strength
        self.alpha[arm] += wins
        self.beta[arm] += len(records) - wins
        self.pulls[arm] += -(-len(records) // self.options.batch)  # a top-up spans several batches
        self.spent += len(records)
        return {"phase": request.purpose, "posterior_mean": round(self._means()[arm], 4)}

    def _means(self) -> np.ndarray:
        return self.alpha / (self.alpha + self.beta)

    def _extremes(self) -> tuple[int, int]:
        pulled = [i for i in range(len(self.arms)) if self.pulls[i] > 0]
        means = self._means()
        return max(pulled, key=means.__getitem__), min(pulled, key=means.__getitem__)

    def ranking(self) -> list[Candidate]:
        """Pulled arms by posterior mean, highest first (the baseline wins ties)."""
        means = self._means()
        return rank_by_score([(arm, means[i]) for i, arm in enumerate(self.arms) if self.pulls[i] > 0], self.baseline)

    def family(self) -> int:
        return len(self.arms)

    def spread_summary(self) -> dict[str, Any]:
        """Best and worst arm by posterior mean, with their observed accuracy and the spread."""
        top, bottom = self._extremes()
        acc = {i: self.score_on(self.arms[i], list(self.memo[self.arms[i].id])) for i in (top, bottom)}
        return {"best": self.arms[top], "best_accuracy": acc[top], "best_n": int(self.pulls[top] * self.options.batch),
                "worst": self.arms[bottom], "worst_accuracy": acc[bottom],
                "worst_n": int(self.pulls[bottom] * self.options.batch), "spread": acc[top] - acc[bottom]}

    def report_lines(self) -> list[str]:
        if self.pulls[0] == 0:
            return ["FormatSpread: no arm was scored."]
        s = self.spread_summary()
        return [
            f"FormatSpread over {len(self.arms)} formats, {int(self.pulls.sum())} pulls of {self.options.batch} "
            f"examples: best format `{s['best'].id}` accuracy {s['best_accuracy']:.3f} on {s['best_n']} "
            f"examples; worst `{s['worst'].id}` {s['worst_accuracy']:.3f} on {s['worst_n']}; "
            f"**spread {s['spread']:.3f}**.",
            f"Best → worst: {self.context.space.diff(s['best'], s['worst'])}.",
        ]
