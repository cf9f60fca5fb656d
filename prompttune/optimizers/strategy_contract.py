"""The strategy contract (ask/tell, in the spirit of Optuna samplers): what a search strategy sees
(`SearchContext`), what it asks for (`TrialRequest`, or a `Challenge` within a `Sweep`) and what it must
answer (`Optimizer`: `ask`, `tell`, `ranking`, `family`).

A strategy proposes and ranks; it never decides what counts as a real gain. It asks for (candidate, example
ids) and is told the per-example records, or asks for a `Challenge` (a candidate against its incumbent) that
the driver (`driver.py`) walks through the staged paired accept rule with a family-wise correction per
`Sweep`. It reads the budget through `SearchContext.remaining()`, which the driver binds to the search
ledger, so a strategy sees the same cap with or without a proposer.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Sequence, get_args, get_origin

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from prompttune.core.config import Serve
from prompttune.core.errors import UserError
from prompttune.core.types import Record
from prompttune.optimizers.proposer import Proposer, checked_instruction
from prompttune.optimizers.search_helpers import rank_by_score
from prompttune.scoring.contract import least_budget
from prompttune.scoring.ledger import BudgetLedger
from prompttune.search_spaces.frozen import keep_frozen
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.search_spaces.space import Candidate, SearchSpace
from prompttune.statistics import Objective, get_objective
from prompttune.statistics.stats import AcceptRule, Decision


@dataclass
class SearchContext:
    """What an optimizer may see: the space, train and dev ids (never test), the objective, and the ceiling on
    prompt tokens the driver holds every candidate to."""

    space: SearchSpace
    train_ids: list[str]
    dev_ids: list[str]
    n_classes: int
    objective: str | Objective = "accuracy"  # a name, or a callable (gold, pred, n_classes) -> float
    seed: int = 0
    budget: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    accept_rule: AcceptRule = field(default_factory=AcceptRule)
    train_labels: dict[str, int] = field(default_factory=dict)
    max_prompt_tokens: int | None = None
    dev_input_words: list[int] = field(default_factory=list)  # what the inputs look like (no labels): demo choice
    serve: Serve = "logprobs"  # the serving contract: which label offsets a candidate may carry
    # Whether the contract can apply label offsets to the baseline's labels: under `generate` never, under `choice`
    # where the labels' first tokens are distinct (the engine sets it once the model's tokenizer is known).
    label_offsets: bool = True
    # The search ledger, bound by the driver when it starts driving (`SearchDriver`): what `remaining` reads.
    ledger: BudgetLedger | None = field(default=None, repr=False, compare=False)

    def remaining(self) -> int | None:
        """Calls left under the cap of the search that drives this context; None = no cap (or not driven)."""
        return self.ledger.remaining_calls() if self.ledger is not None else None

    def budget_for(self, search_calls: int) -> int:
        """The --budget to name where the search needs `search_calls` calls (a full dev evaluation included)."""
        return least_budget(search_calls, len(self.dev_ids))

    def spent(self) -> int:
        """Calls the search has spent of `budget` (0 without a cap)."""
        left = self.remaining()
        return self.budget - left if left is not None else 0

    def score(self, records: Sequence[Record]) -> float:
        gold = [r.gold for r in records]
        pred = [r.pred for r in records]
        objective = get_objective(self.objective) if isinstance(self.objective, str) else self.objective
        return float(objective(gold, pred, self.n_classes))


@dataclass(frozen=True)
class TrialRequest:
    candidate: Candidate
    example_ids: tuple[str, ...]
    purpose: str = "evaluate"


@dataclass(frozen=True)
class Sweep:
    """A family of challenges whose false accepts are bounded together: each of its `size`
    planned challenges gets alpha / size (Bonferroni, valid for any dependence and order)."""

    number: int
    size: int


@dataclass(frozen=True)
class Challenge:
    """Replace `incumbent` by `candidate`? Decided by the driver on a prefix of `order`."""

    candidate: Candidate
    incumbent: Candidate
    order: tuple[str, ...]
    sweep: Sweep


class OptimizerOptions(BaseModel):
    """An optimizer's `--option KEY=VALUE` settings: typed, with defaults; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


def validate_options(name: str, options_model: type[OptimizerOptions], values: dict[str, Any]) -> OptimizerOptions:
    """Typed options, or one line naming the bad key and what was expected."""
    try:
        return options_model.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(map(str, err["loc"])) or "?"
        known = ", ".join(options_model.model_fields) or "none"
        if err["type"] == "extra_forbidden":
            raise UserError(f"{name}: unknown option {key!r} (options: {known})") from None
        raise UserError(f"{name}: option {key}={err.get('input')!r}: {err['msg']}") from None


def describe_options(options_model: type[OptimizerOptions]) -> list[str]:
    """One line per option: name, type, default, what it does (for --help-options)."""
    lines = []
    for key, info in options_model.model_fields.items():
        allowed = get_args(info.annotation) if get_origin(info.annotation) is Literal else ()
        kind = (f"one of {', '.join(map(str, allowed))}" if allowed
                else getattr(info.annotation, "__name__", str(info.annotation)))
        default = "unset" if info.default is None else repr(info.default)  # None: the description says what then
        lines.append(f"{key} ({kind}, default {default}): {info.description or ''}".rstrip(": "))
    return lines or ["(no options)"]


def example_input(space: SearchSpace, example_id: str, limit: int = 300) -> str:
    """A train example's input text, for proposer and critic prompts."""
    example = next(e for e in space.demo_pool if e.id == example_id)
    return " ".join(example.fields.values())[:limit]


def checked_rewrite(reply: str, spec: PromptSpec, space: SearchSpace) -> str | None:
    """A proposer's rewrite of `spec`'s instruction if usable (`checked_instruction`), keeping the frozen
    texts that instruction holds (appended where the rewrite dropped them), so the driver does not reject it."""
    text = checked_instruction(reply, spec.label_words)
    return None if text is None else keep_frozen(text, spec.instruction, space.frozen)


def spec_candidate(spec: PromptSpec, origin: str) -> Candidate:
    """A candidate outside the declared grid (a proposed instruction, a demo set): id hashes the spec
    (an uncalibrated spec hashes as before `calibrate` and `label_bias` existed, so earlier runs keep their ids)."""
    digest = hashlib.sha1(json.dumps(spec.hashed_fields(), sort_keys=True).encode()).hexdigest()[:12]
    return Candidate(f"{origin}-{digest}", (), spec)


class Optimizer(ABC):
    """One search strategy: `ask` for work, digest it in `tell`, rank what it has seen."""

    name: ClassVar[str]
    Options: ClassVar[type[OptimizerOptions]] = OptimizerOptions

    def __init__(self, context: SearchContext, proposer: Proposer | None = None) -> None:
        self.context = context
        self.options = validate_options(self.name, self.Options, context.options)
        self.rng = np.random.default_rng(context.seed)
        self.proposer = proposer
        self.memo: dict[str, dict[str, Record]] = {}
        self.baseline = context.space.default_candidate()
        self.sweeps = 0

    @classmethod
    def check(cls, context: SearchContext) -> None:
        """Refuse a run this strategy cannot do (a `UserError`), from what is known before any model
        loads; most strategies can do any run the ledger and dev split allow."""

    def example_text(self, example_id: str, limit: int = 300) -> str:
        """A train example's input text (`example_input`)."""
        return example_input(self.context.space, example_id, limit)

    def usable_rewrite(self, reply: str, spec: PromptSpec) -> str | None:
        """A proposer's rewrite of `spec`'s instruction if usable, frozen texts kept (`checked_rewrite`)."""
        return checked_rewrite(reply, spec, self.context.space)

    def open_sweep(self, size: int) -> Sweep:
        """Declare the next `size` challenges as one family (see `Sweep`)."""
        self.sweeps += 1
        return Sweep(self.sweeps, max(size, 1))

    @abstractmethod
    def ask(self) -> TrialRequest | Challenge | None:
        """Next evaluation or challenge wanted, or None when the strategy is finished."""

    def tell(self, request: TrialRequest, records: list[Record]) -> dict[str, Any]:
        """Digest the records of a TrialRequest; return facts to log with the trial."""
        return {}

    def upcoming(self) -> list[TrialRequest]:
        """Requests this strategy will ask right after the current one whatever its answers (the rest of a
        round, of a race step, of a screen): the driver has the model answer them together in one backend
        call, while they are still asked, charged and told one by one. None by default."""
        return []

    def tell_challenge(self, challenge: Challenge, decision: Decision) -> None:
        """The driver's decision on a challenge this optimizer asked for."""
        raise NotImplementedError(f"{self.name} asked for a challenge but does not digest one")

    @abstractmethod
    def ranking(self) -> list[Candidate]:
        """Candidates in the strategy's order of preference on dev, leader first; [] before any."""

    @abstractmethod
    def family(self) -> int:
        """How many candidates the leader was selected from (for the selection-bias scale)."""

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

    def dev_ids_of(self, candidate: Candidate) -> list[str]:
        """The dev examples a candidate was scored on, in dev order."""
        seen = self.memo.get(candidate.id, {})
        return [i for i in self.context.dev_ids if i in seen]


class IncumbentSearch(Optimizer):
    """Shared machinery of hill-climbers (COPLE, P2G): an incumbent that a candidate replaces
    only when the driver accepts a challenge on one fixed dev order.

    The accept rule steers the climb (which prompt the next edits start from); the dev ranking
    handed to the verdict is selection, for power: every prompt scored on the whole dev order, by
    its score there. A challenger that clearly helps but missed its sweep's share of alpha can so
    still be tested, on the test split, which decides.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.order: tuple[str, ...] = tuple(self.rng.permutation(self.context.dev_ids).tolist())
        self.incumbent = self.baseline
        self.accepted: list[Candidate] = []
        self.challenged = 0
        self.contenders: dict[str, Candidate] = {self.baseline.id: self.baseline}

    def challenge(self, candidate: Candidate, sweep: Sweep) -> Challenge:
        self.challenged += 1
        self.contenders.setdefault(candidate.id, candidate)
        return Challenge(candidate, self.incumbent, self.order, sweep)

    def on_accept(self, candidate: Candidate) -> None:
        """Hook: the strategy's bookkeeping when a challenger wins."""

    def tell_challenge(self, challenge: Challenge, decision: Decision) -> None:
        if decision.verdict == "accept":
            self.incumbent = challenge.candidate
            self.accepted.append(challenge.candidate)
            self.on_accept(challenge.candidate)

    def ranking(self) -> list[Candidate]:
        """The baseline, every accepted prompt and every prompt scored on the whole dev order, by dev
        score (prompts stopped early for trailing, or by the budget, have too little evidence)."""
        accepted = {c.id for c in self.accepted} | {self.baseline.id}
        eligible = [c for c in self.contenders.values() if self.dev_ids_of(c)
                    and (c.id in accepted or not self.missing(c, self.order))]
        ranked = rank_by_score([(c, self.score_on(c, self.dev_ids_of(c))) for c in eligible], self.baseline)
        return ranked or [self.baseline]

    def family(self) -> int:
        return 1 + self.challenged
