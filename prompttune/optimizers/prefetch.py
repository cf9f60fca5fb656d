"""What the search driver has the model answer ahead: a request and the strategy's `upcoming` ones in one backend
call, so the backend gets batches as large as the strategy allows; results, charges and the trial log stay those
of asking one by one (`Evaluator.prefetch`)."""

from __future__ import annotations

from typing import Callable

from prompttune.optimizers.strategy_contract import TrialRequest
from prompttune.scoring.evaluator import Evaluator
from prompttune.search_spaces.space import Candidate


class Prefetch:
    """The batches answered ahead for one search, each (candidate, examples) at most once."""

    def __init__(self, evaluator: Evaluator) -> None:
        self.evaluator = evaluator
        self.answered: set[tuple[str, tuple[str, ...]]] = set()  # (candidate, examples) answered ahead

    def answer(self, request: TrialRequest, upcoming: Callable[[], list[TrialRequest]],
               admissible: Callable[[Candidate], bool]) -> None:
        """Unless an earlier batch held it: `request` and the `upcoming` requests of `admissible` candidates,
        answered by the model in one call, up to the rows a call may hold (`Meter.call_rows`: about ten
        seconds' worth); admission is checked only as far as the call reaches."""
        if (request.candidate.id, request.example_ids) in self.answered:
            return
        limit, rows, batch = self.evaluator.meter.call_rows(), 0, []
        asked = {(r.candidate.id, r.example_ids): r for r in (request, *upcoming())}  # once each
        for key, r in asked.items():  # in order
            if not r.example_ids or key in self.answered or not admissible(r.candidate):
                continue
            if batch and rows + len(r.example_ids) > limit:
                break
            batch.append(r)
            rows += len(r.example_ids)
        if len(batch) > 1:
            self.answered.update((r.candidate.id, r.example_ids) for r in batch)
            self.evaluator.prefetch([(r.candidate.spec, r.example_ids) for r in batch])
