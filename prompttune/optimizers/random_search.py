"""Random search: uniform valid candidates, each on the full dev split — the honest baseline."""

from __future__ import annotations

from typing import Any, Iterator

from prompttune.evaluation.evaluator import Record
from prompttune.optimizers.base import Optimizer, TrialRequest
from prompttune.search_spaces.space import Assignment, Candidate

ENUMERATE_LIMIT = 20_000


class RandomSearch(Optimizer):
    """Baseline first, then distinct valid candidates in random order; best full-dev score wins."""

    name = "random"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        space = self.context.space
        self._baseline = space.default_candidate()
        self._pending: Iterator[Assignment] = self._candidate_stream()
        self._seen = {self._baseline.id}
        self._best: tuple[Candidate, float] | None = None
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
            return TrialRequest(self._baseline, dev, "baseline")
        for assignment in self._pending:
            candidate = self.context.space.build(assignment)
            if candidate.id not in self._seen:
                self._seen.add(candidate.id)
                return TrialRequest(candidate, dev)
        return None

    def tell(self, request: TrialRequest, records: list[Record]) -> dict[str, Any]:
        score = self.context.score(records)
        improved = self._best is None or score > self._best[1]
        if improved:
            self._best = (request.candidate, score)
        return {"new_best": improved}

    def best(self) -> tuple[Candidate, float]:
        if self._best is None:
            raise RuntimeError("no candidate was evaluated")
        return self._best
