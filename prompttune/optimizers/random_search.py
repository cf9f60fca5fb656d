"""Random search: uniform valid candidates, each on the full dev split — the honest baseline.

Example, on the synthetic oracle (a test device, `prompttune.testing.OracleProblem`: a
prompt is better, 0.85 against 0.55, when its instruction says 'Pick' or it carries 2+ demos)::

    >>> from prompttune.testing import OracleProblem
    >>> import prompttune
    >>> problem = OracleProblem.colours()
    >>> run = prompttune.optimize(problem.task, optimizer="random", budget=600,
    ...                           space=problem.space, backend=problem.backend, record=False)
    >>> len(run.trials.load()), run.ledger.calls  # the baseline and 4 candidates, each on all 120 dev examples
    (5, 600)
    >>> run.outcome.leader.values(problem.space)
    {'field': 'Input: {}', 'output': 'Colour: {}', 'verb': 'Pick'}

On a real task (PROMPTTUNE_DATA_DIR=../shared/data; or from Python,
``prompttune.optimize("agnews", optimizer="random", budget=2000)``)::

    optimize --task agnews --optimizer random --budget 2000
"""

from __future__ import annotations

from typing import Any

from prompttune.core.types import Record
from prompttune.optimizers.search_helpers import rank_by_score
from prompttune.optimizers.strategy_contract import Optimizer, TrialRequest
from prompttune.search_spaces.space import Candidate


class RandomSearch(Optimizer):
    """Baseline first, then distinct valid candidates in random order, each on the full dev split.

    Ranked by dev score (the baseline wins ties: no change without evidence); the driver's
    held-out verdict decides whether the leader ships.
    """

    name = "random"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        affordable = max(2, self.context.budget // max(1, len(self.context.dev_ids)))
        self._queue = self.context.space.distinct_candidates(self.rng, affordable, first=[self.baseline])
        self._scored: list[tuple[Candidate, float]] = []

    def ask(self) -> TrialRequest | None:
        """The baseline first, then the drawn candidates, each on the full dev split."""
        if len(self._scored) >= len(self._queue):
            return None
        candidate = self._queue[len(self._scored)]
        return TrialRequest(candidate, tuple(self.context.dev_ids),
                            "baseline" if candidate.id == self.baseline.id else "evaluate")

    def tell(self, request: TrialRequest, records: list[Record]) -> dict[str, Any]:
        self._scored.append((request.candidate, self.context.score(records)))
        return {}

    def ranking(self) -> list[Candidate]:
        return rank_by_score(self._scored, self.baseline)

    def family(self) -> int:
        return len(self._scored)

    def report_lines(self) -> list[str]:
        tried = len(self._scored) - 1
        if tried <= 0:
            return ["Random search: no candidate besides the baseline was evaluated."]
        leader = self.ranking()[0]
        return [f"Random search: {tried} candidates besides the baseline on the full dev split; "
                f"the dev leader is `{leader.id}`."]
