"""Random search: uniform valid candidates, each on the full dev split — the honest baseline."""

from __future__ import annotations

from typing import Any, Iterator

from prompttune.core.types import Record
from prompttune.optimizers.base import Optimizer, TrialRequest
from prompttune.search_spaces.space import Assignment, Candidate

ENUMERATE_LIMIT = 20_000


class RandomSearch(Optimizer):
    """Baseline first, then distinct valid candidates in random order, each on the full dev split.

    Ranked by dev score (the baseline wins ties: no change without evidence); the driver's
    held-out verdict decides whether the leader ships.
    """

    name = "random"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: Iterator[Assignment] = self._candidate_stream()
        self._seen = {self.baseline.id}
        self._scored: list[tuple[Candidate, float]] = []
        self._asked_baseline = False

    def _candidate_stream(self) -> Iterator[Assignment]:
        space = self.context.space
        if space.nominal_size() <= ENUMERATE_LIMIT:
            pool = list(space.enumerate())
            for i in self.rng.permutation(len(pool)):
                yield pool[i]
        else:
            while True:
                yield space.sample(self.rng)

    def ask(self) -> TrialRequest | None:
        dev = tuple(self.context.dev_ids)
        if not self._asked_baseline:
            self._asked_baseline = True
            return TrialRequest(self.baseline, dev, "baseline")
        for assignment in self._pending:
            candidate = self.context.space.build(assignment)
            if candidate.id not in self._seen:
                self._seen.add(candidate.id)
                return TrialRequest(candidate, dev)
        return None

    def tell(self, request: TrialRequest, records: list[Record]) -> dict[str, Any]:
        self._scored.append((request.candidate, self.context.score(records)))
        return {}

    def ranking(self) -> list[Candidate]:
        order = sorted(range(len(self._scored)),
                       key=lambda i: (-self._scored[i][1], self._scored[i][0].id != self.baseline.id, i))
        return [self._scored[i][0] for i in order]

    def family(self) -> int:
        return len(self._scored)

    def report_lines(self) -> list[str]:
        tried = len(self._scored) - 1
        if tried <= 0:
            return ["Random search: no candidate besides the baseline was evaluated."]
        leader = self.ranking()[0]
        return [f"Random search: {tried} candidates besides the baseline on the full dev split; "
                f"the dev leader is `{leader.id}`."]
