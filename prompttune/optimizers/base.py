"""The optimizer contract (ask/tell, in the spirit of Optuna samplers) and the loop that drives it.

An optimizer never calls the model for scoring itself: it asks for (candidate, example ids) and
is told the per-example records. The driver owns the evaluator, the budget and the log, so every
strategy spends budget the same way and finishes gracefully when the cap is hit. Proposer and
critic calls go through a `Proposer` charged to the same ledger.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from prompttune.errors import BudgetExhausted
from prompttune.evaluation.evaluator import Evaluator, Record
from prompttune.objectives import get_objective
from prompttune.objectives.stats import AcceptRule, Decision
from prompttune.optimizers.proposer import Proposer
from prompttune.search_spaces.prompt import PromptSpec
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
    budget: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    accept_rule: AcceptRule = field(default_factory=AcceptRule)
    train_labels: dict[str, int] = field(default_factory=dict)

    def score(self, records: Sequence[Record]) -> float:
        gold = [r.gold for r in records]
        pred = [r.pred for r in records]
        return float(get_objective(self.objective)(gold, pred, self.n_classes))


@dataclass(frozen=True)
class TrialRequest:
    candidate: Candidate
    example_ids: tuple[str, ...]
    purpose: str = "evaluate"


def spec_candidate(spec: PromptSpec, origin: str) -> Candidate:
    """A candidate outside the declared grid (a proposed instruction, a demo set): id hashes the spec."""
    digest = hashlib.sha1(json.dumps(asdict(spec), sort_keys=True).encode()).hexdigest()[:12]
    return Candidate(f"{origin}-{digest}", (), spec)


class Optimizer(ABC):
    name: ClassVar[str]

    def __init__(self, context: SearchContext, proposer: Proposer | None = None) -> None:
        self.context = context
        self.rng = np.random.default_rng(context.seed)
        self.proposer = proposer
        self.memo: dict[str, dict[str, Record]] = {}
        self.baseline = context.space.default_candidate()

    def option(self, key: str, default: Any) -> Any:
        """An `--option KEY=VALUE` setting, coerced to the default's type."""
        value = self.context.options.get(key, default)
        return type(default)(value) if default is not None and value is not None else value

    def example_text(self, example_id: str, limit: int = 300) -> str:
        """A train example's input text, for proposer and critic prompts."""
        example = next(e for e in self.context.space.demo_pool if e.id == example_id)
        return " ".join(example.fields.values())[:limit]

    def remaining_budget(self) -> int | None:
        """Calls left under the cap (the proposer shares the search ledger); None = no cap."""
        return self.proposer.ledger.remaining_calls() if self.proposer else None

    @abstractmethod
    def ask(self) -> TrialRequest | None:
        """Next evaluation wanted, or None when the strategy is finished."""

    @abstractmethod
    def tell(self, request: TrialRequest, records: list[Record]) -> dict[str, Any]:
        """Digest the records; return the decision to log (e.g. accepted, p-value)."""

    @abstractmethod
    def best(self) -> tuple[Candidate, float]:
        """Best accepted candidate so far and its dev objective (anytime behaviour)."""

    def report_lines(self) -> list[str]:
        """Optimizer-specific facts for report.md (e.g. share of the space evaluated)."""
        return []

    # -- per-example memory, so paired comparisons reuse what was already scored ----------------
    def observe(self, request: TrialRequest, records: list[Record]) -> None:
        self.memo.setdefault(request.candidate.id, {}).update({r.example_id: r for r in records})

    def missing(self, candidate: Candidate, ids: Sequence[str]) -> tuple[str, ...]:
        seen = self.memo.get(candidate.id, {})
        return tuple(i for i in ids if i not in seen)

    def records(self, candidate: Candidate, ids: Sequence[str]) -> list[Record]:
        seen = self.memo[candidate.id]
        return [seen[i] for i in ids]

    def correct(self, candidate: Candidate, ids: Sequence[str]) -> list[bool]:
        return [r.correct for r in self.records(candidate, ids)]

    def score_on(self, candidate: Candidate, ids: Sequence[str]) -> float:
        return self.context.score(self.records(candidate, ids))


class StagedChallenge:
    """One candidate-vs-incumbent decision, walked through the accept rule's stages.

    Both prompts are scored on the same prefix of a fixed example order, so the comparison is
    paired; the decision uses all paired examples so far (exact one-sided McNemar).
    """

    def __init__(self, optimizer: Optimizer, candidate: Candidate, incumbent: Candidate,
                 order: Sequence[str], rule: AcceptRule) -> None:
        self.optimizer, self.candidate, self.incumbent = optimizer, candidate, incumbent
        self.order, self.rule = list(order), rule
        self.n = min(rule.stages[0], len(self.order))

    def next_request(self) -> TrialRequest | None:
        ids = self.order[: self.n]
        for who, purpose in ((self.incumbent, "incumbent"), (self.candidate, "challenge")):
            todo = self.optimizer.missing(who, ids)
            if todo:
                return TrialRequest(who, todo, purpose)
        return None

    def decide(self) -> Decision:
        ids = self.order[: self.n]
        decision = self.rule.decide(self.optimizer.correct(self.candidate, ids),
                                    self.optimizer.correct(self.incumbent, ids),
                                    final=self.n >= len(self.order))
        if decision.verdict == "continue":
            self.n = min(self.rule.next_n(self.n) or len(self.order), len(self.order))
        return decision


class IncumbentSearch(Optimizer):
    """Shared machinery of hill-climbers (COPLE, P2G): an incumbent that a candidate replaces
    only through a staged paired challenge on one fixed dev order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.order: list[str] = self.rng.permutation(self.context.dev_ids).tolist()
        self.incumbent = self.baseline
        self.accepted: list[Candidate] = []
        self.challenge: StagedChallenge | None = None

    def challenge_with(self, candidate: Candidate) -> None:
        self.challenge = StagedChallenge(self, candidate, self.incumbent, self.order, self.context.accept_rule)

    def on_accept(self, candidate: Candidate) -> None:
        """Hook: the strategy's bookkeeping when a challenger wins."""

    def decide_challenge(self) -> dict[str, Any]:
        assert self.challenge is not None
        decision = self.challenge.decide()
        if decision.verdict != "continue":
            if decision.verdict == "accept":
                self.incumbent = self.challenge.candidate
                self.accepted.append(self.incumbent)
                self.on_accept(self.incumbent)
            self.challenge = None
        return decision_log(decision)

    def tell(self, request: TrialRequest, records: list[Record]) -> dict[str, Any]:
        if self.challenge is None or self.challenge.next_request() is not None:
            return {}
        return self.decide_challenge()

    def baseline_topup(self) -> TrialRequest | None:
        """At the end: the baseline on the leader's examples, for the final paired verdict."""
        if not self.accepted:
            return None
        leader_ids = [i for i in self.order if i in self.memo.get(self.accepted[-1].id, {})]
        todo = self.missing(self.baseline, leader_ids)
        return TrialRequest(self.baseline, todo, "baseline top-up") if todo else None

    def best(self) -> tuple[Candidate, float]:
        checked = [i for i in self.order if i in self.memo.get(self.baseline.id, {})]
        if not checked:
            raise RuntimeError("the baseline was not scored yet")
        if self.accepted:
            leader = self.accepted[-1]
            shared = [i for i in checked if i in self.memo[leader.id]]
            if final_accept(self, leader, shared).verdict == "accept":
                return leader, self.score_on(leader, shared)
        return self.baseline, self.score_on(self.baseline, checked)


def decision_log(decision: Decision) -> dict[str, Any]:
    c = decision.comparison
    return {"decision": decision.verdict, "paired_n": decision.n, "b": c.b, "c": c.c,
            "p": round(decision.p_value, 6)}


def final_accept(optimizer: Optimizer, winner: Candidate, ids: Sequence[str],
                 family: int = 1) -> Decision:
    """The winner against the baseline on the same examples, Bonferroni-corrected for the
    `family` of candidates it was selected from (a max over F noisy scores needs it)."""
    rule = AcceptRule(stages=(len(ids),), alpha=optimizer.context.accept_rule.alpha / max(family, 1))
    return rule.decide(optimizer.correct(winner, ids), optimizer.correct(optimizer.baseline, ids),
                       final=True)


@dataclass
class SearchOutcome:
    best: Candidate
    best_dev_score: float
    n_trials: int
    n_candidates: int
    stopped_by_budget: bool
    anytime: list[tuple[int, float]]
    notes: list[str]


def run_search(optimizer: Optimizer, evaluator: Evaluator, storage: TrialStorage,
               on_trial: Callable[[dict], None] | None = None) -> SearchOutcome:
    """Ask, evaluate, tell, log — until the optimizer is done or the budget cap is reached."""
    number = 0
    seen: set[str] = set()
    stopped_by_budget = False
    anytime: list[tuple[int, float]] = []
    space = optimizer.context.space
    while True:
        try:
            request = optimizer.ask()
            if request is None:
                break
            records = evaluator.evaluate(request.candidate.spec, request.example_ids)
        except BudgetExhausted:
            stopped_by_budget = True
            break
        optimizer.observe(request, records)
        decision = optimizer.tell(request, records)
        seen.add(request.candidate.id)
        trial = {
            "number": number,
            "candidate_id": request.candidate.id,
            "purpose": request.purpose,
            "dimensions": request.candidate.values(space),
            "n": len(records),
            "score": optimizer.context.score(records),
            "accuracy": sum(r.correct for r in records) / len(records),
            "budget_spent": evaluator.ledger.calls,
            "tokens_spent": evaluator.ledger.tokens,
            **decision,
        }
        if not request.candidate.assignment:
            trial["instruction"] = request.candidate.spec.instruction
            trial["demo_ids"] = list(request.candidate.spec.demo_ids)
        try:
            anytime.append((evaluator.ledger.calls, optimizer.best()[1]))
            trial["best_so_far"] = anytime[-1][1]
        except RuntimeError:
            pass
        storage.append(trial)
        if on_trial:
            on_trial(trial)
        number += 1
    best, best_score = optimizer.best()
    return SearchOutcome(best, best_score, number, len(seen), stopped_by_budget, anytime,
                         optimizer.report_lines())
