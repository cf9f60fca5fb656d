"""The optimizer contract (ask/tell, in the spirit of Optuna samplers) and the loop that drives it.

An optimizer never calls the model for scoring itself: it asks for (candidate, example ids)
and is told the per-example records. The driver owns the evaluator, the budget and the log,
so every strategy spends budget the same way and finishes gracefully when the cap is hit.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from prompttune.errors import BudgetExhausted
from prompttune.evaluation.evaluator import Evaluator, Record
from prompttune.objectives import get_objective
from prompttune.search_spaces.space import Candidate, SearchSpace
from prompttune.storage import TrialStorage


@dataclass
class SearchContext:
    """What an optimizer may see: the space, train and dev ids (never test), the objective."""

    space: SearchSpace
    train_ids: list[str]
    dev_ids: list[str]
    n_classes: int
    objective: str = "accuracy"
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)

    def score(self, records: Sequence[Record]) -> float:
        gold = [r.gold for r in records]
        pred = [r.pred for r in records]
        return float(get_objective(self.objective)(gold, pred, self.n_classes))


@dataclass(frozen=True)
class TrialRequest:
    candidate: Candidate
    example_ids: tuple[str, ...]
    purpose: str = "evaluate"


class Optimizer(ABC):
    name: ClassVar[str]

    def __init__(self, context: SearchContext, evaluator: Evaluator | None = None) -> None:
        self.context = context
        self.rng = np.random.default_rng(context.seed)
        # Only for proposer/critic calls (charged to the same ledger); scoring goes through ask/tell.
        self.evaluator = evaluator

    @abstractmethod
    def ask(self) -> TrialRequest | None:
        """Next evaluation wanted, or None when the strategy is finished."""

    @abstractmethod
    def tell(self, request: TrialRequest, records: list[Record]) -> dict[str, Any]:
        """Digest the records; return the decision to log (e.g. accepted, p-value)."""

    @abstractmethod
    def best(self) -> tuple[Candidate, float]:
        """Best candidate so far and its full-dev objective (anytime behaviour)."""


@dataclass
class SearchOutcome:
    best: Candidate
    best_dev_score: float
    n_trials: int
    n_candidates: int
    stopped_by_budget: bool


def run_search(optimizer: Optimizer, evaluator: Evaluator, storage: TrialStorage,
               on_trial: Callable[[dict], None] | None = None) -> SearchOutcome:
    """Ask, evaluate, tell, log — until the optimizer is done or the budget cap is reached."""
    number = 0
    seen: set[str] = set()
    stopped_by_budget = False
    while True:
        try:
            request = optimizer.ask()
            if request is None:
                break
            records = evaluator.evaluate(request.candidate.spec, request.example_ids)
        except BudgetExhausted:
            stopped_by_budget = True
            break
        decision = optimizer.tell(request, records)
        seen.add(request.candidate.id)
        trial = {
            "number": number,
            "candidate_id": request.candidate.id,
            "purpose": request.purpose,
            "dimensions": request.candidate.values(optimizer.context.space),
            "n": len(records),
            "score": optimizer.context.score(records),
            "accuracy": sum(r.correct for r in records) / len(records),
            "budget_spent": evaluator.ledger.calls,
            "tokens_spent": evaluator.ledger.tokens,
            **decision,
        }
        storage.append(trial)
        if on_trial:
            on_trial(trial)
        number += 1
    best, best_score = optimizer.best()
    return SearchOutcome(best, best_score, number, len(seen), stopped_by_budget)
