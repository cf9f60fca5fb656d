"""The optimizer contract (ask/tell, in the spirit of Optuna samplers) and the driver that owns
the decision protocol.

An optimizer proposes and ranks; it never decides what counts as a real gain. It asks for
(candidate, example ids) and is told the per-example records, or asks for a `Challenge` (a
candidate against its incumbent) that the driver walks through the staged paired accept rule
with a family-wise correction per `Sweep`. It exposes its `ranking()` (leader first) and the
`family()` its leader was selected from. The driver owns the evaluator, the budget, the log,
the anytime curve and the baseline top-up, and it merges the baseline into the strategy's ranking
by paired dev score (`SearchDriver.ranking`): a strategy may rank without the baseline (successive
halving keeps only its last round's survivors) or on unpaired evidence, but what is handed on
never puts a prompt above the baseline unless it beat the baseline on the same dev examples.
The driver also admits every candidate before it is scored (`admission.py`: frozen texts, the prompt-token
ceiling): one that fails is neither scored nor charged, the optimizer is told it answered nothing, and it never
enters the ranking. The held-out verdict comes after, in `prompttune.evaluation.confirmation`, for every
optimizer alike.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar, Iterator, Literal, Sequence, get_args, get_origin

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from prompttune.core.config import Serve
from prompttune.core.errors import BudgetExhausted, UserError
from prompttune.core.storage import TrialStorage
from prompttune.core.types import Record
from prompttune.evaluation.evaluator import Evaluator
from prompttune.objectives import Objective, get_objective
from prompttune.objectives.stats import AcceptRule, Decision, paired_compare
from prompttune.optimizers.admission import Admission
from prompttune.optimizers.proposer import Proposer, checked_instruction
from prompttune.optimizers.search_helpers import place_baseline, rank_by_score
from prompttune.search_spaces.frozen import keep_frozen
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.search_spaces.space import Candidate, SearchSpace


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
    # where each label is one token (the engine sets it once the model's tokenizer is known).
    label_offsets: bool = True

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
        lines.append(f"{key} ({kind}, default {info.default!r}): {info.description or ''}".rstrip(": "))
    return lines or ["(no options)"]


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
        """A train example's input text, for proposer and critic prompts."""
        example = next(e for e in self.context.space.demo_pool if e.id == example_id)
        return " ".join(example.fields.values())[:limit]

    def usable_rewrite(self, reply: str, spec: PromptSpec) -> str | None:
        """A proposer's rewrite of `spec`'s instruction if usable (`checked_instruction`), keeping the frozen
        texts that instruction holds (appended where the rewrite dropped them), so the driver does not reject it."""
        text = checked_instruction(reply, spec.label_words)
        return None if text is None else keep_frozen(text, spec.instruction, self.context.space.frozen)

    def remaining_budget(self) -> int | None:
        """Calls left under the cap (the proposer shares the search ledger); None = no cap."""
        return self.proposer.meter.ledger.remaining_calls() if self.proposer else None

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


def decision_log(decision: Decision) -> dict[str, Any]:
    c = decision.comparison
    return {"decision": decision.verdict, "paired_n": decision.n, "b": c.b, "c": c.c,
            "p": round(decision.p_value, 6), "threshold": float(f"{decision.threshold:.3g}")}


@dataclass(frozen=True)
class ScoredPrompt:
    """A candidate the search scored on dev: its prompt tokens per request and its dev objective (the report's
    tokens-against-score plot)."""

    candidate_id: str
    prompt_tokens: int
    dev_score: float
    dev_n: int


@dataclass
class SearchOutcome:
    """What the search hands to the verdict: the dev ranking and how the leader compares on dev."""

    ranking: list[Candidate]  # the strategy's, with the baseline placed by paired dev score
    family: int
    leader_dev_score: float
    leader_dev_n: int
    baseline_dev_score: float  # on the leader's dev examples (paired)
    baseline_dev_n: int
    n_trials: int
    n_candidates: int
    stopped_by_budget: bool
    anytime: list[tuple[int, float]]
    notes: list[str]
    challenges: int = 0
    leaders: list[tuple[int, int, PromptSpec]] = field(default_factory=list)  # (calls, tokens, spec) at each change
    sweeps: int = 0
    challenge_accepts: int = 0
    sweeps_with_accept: int = 0
    interrupted: bool = False  # stopped on request (a signal) before the strategy or the budget ended it
    rejected: dict[str, int] = field(default_factory=dict)  # candidates the driver refused, by refusal
    scored: list[ScoredPrompt] = field(default_factory=list)

    @property
    def leader(self) -> Candidate:
        return self.ranking[0]


class SearchStopped(Exception):
    """The run asked the search to stop: it ends before the next evaluation, never inside one."""


class SearchDriver:
    """Runs one optimizer: evaluates its requests, decides its challenges, logs every trial."""

    def __init__(self, optimizer: Optimizer, evaluator: Evaluator, storage: TrialStorage,
                 on_trial: Callable[[dict], None] | None = None,
                 should_stop: Callable[[], bool] | None = None) -> None:
        self.optimizer, self.evaluator, self.storage, self.on_trial = optimizer, evaluator, storage, on_trial
        self.should_stop = should_stop
        self.number = 0
        self.seen: dict[str, Candidate] = {}  # admitted candidates, scored on some examples
        self.rejected: dict[str, str] = {}  # candidate id -> why the admission refused it
        self.admission = Admission(evaluator.backend, evaluator.demo_pool, optimizer.context.space.frozen,
                                   optimizer.context.max_prompt_tokens, optimizer.context.serve)
        self.anytime: list[tuple[int, float]] = []
        self.leaders: list[tuple[int, int, PromptSpec]] = []  # (calls, tokens, spec) where each leader took over
        self.sweep_use: dict[int, int] = {}
        self.sweep_accepts: dict[int, int] = {}
        self.prefetched: set[tuple[str, tuple[str, ...]]] = set()  # (candidate, examples) answered ahead

    def run(self) -> SearchOutcome:
        """Ask, evaluate or challenge, tell, log — until the optimizer is done or the cap is hit."""
        stopped_by_budget = interrupted = False
        try:
            while (request := self.optimizer.ask()) is not None:
                if isinstance(request, Challenge):
                    self.optimizer.tell_challenge(request, self.run_challenge(request))
                else:
                    records = self.evaluate(request)
                    self.log(request, records, self.optimizer.tell(request, records))
                self.baseline_topup()
        except BudgetExhausted:
            stopped_by_budget = True
        except SearchStopped:
            interrupted = True
        return self.outcome(stopped_by_budget, interrupted)

    def admits(self, candidate: Candidate) -> bool:
        """Whether the candidate meets the run's limits (`Admission`); a refusal is recorded once."""
        if candidate.id in self.seen:
            return True
        if candidate.id not in self.rejected and (refusal := self.admission.refusal(candidate.spec)) is not None:
            self.rejected[candidate.id] = refusal
        return candidate.id not in self.rejected

    def evaluate(self, request: TrialRequest) -> list[Record]:
        """The candidate's records from the evaluator; for a candidate the admission refuses, no call and no
        charge: an invalid answer on every example, so every strategy ranks it last."""
        if self.should_stop and self.should_stop():
            raise SearchStopped
        candidate = request.candidate
        if self.admits(candidate):
            self.prefetch(request)
            records = self.evaluator.evaluate(candidate.spec, request.example_ids)
            self.seen[candidate.id] = candidate
        else:
            examples = self.evaluator.examples
            records = [Record(i, examples[i].label, None, None, None, 0, 0, False) for i in request.example_ids]
        self.optimizer.observe(request, records)
        return records

    def prefetch(self, request: TrialRequest) -> None:
        """Unless an earlier batch held it: `request` and the strategy's `upcoming` requests of admitted
        candidates, answered by the model in one call (`Evaluator.prefetch`), so the backend gets batches
        as large as the strategy allows; results, charges and the log are those of asking one by one."""
        if (request.candidate.id, request.example_ids) in self.prefetched:
            return
        batch = [r for r in (request, *self.optimizer.upcoming())
                 if r.example_ids and (r.candidate.id, r.example_ids) not in self.prefetched and
                 (r.candidate.id in self.seen or
                  (r.candidate.id not in self.rejected and self.admission.refusal(r.candidate.spec) is None))]
        if len(batch) > 1:
            self.prefetched.update((r.candidate.id, r.example_ids) for r in batch)
            self.evaluator.prefetch([(r.candidate.spec, r.example_ids) for r in batch])

    def run_challenge(self, challenge: Challenge) -> Decision:
        """Staged paired looks at the sweep's share of alpha; both prompts on the same prefix."""
        opt, rule = self.optimizer, self.optimizer.context.accept_rule
        used = self.sweep_use.get(challenge.sweep.number, 0) + 1
        if used > challenge.sweep.size:
            raise RuntimeError(f"{opt.name}: sweep {challenge.sweep.number} planned {challenge.sweep.size} "
                               "challenges and asked for more")
        self.sweep_use[challenge.sweep.number] = used
        if not self.admits(challenge.candidate):  # refused without a call, the incumbent's included
            return Decision("reject", paired_compare([], []), 0, 1.0, 0.0)
        alpha = rule.alpha / challenge.sweep.size
        n_max = len(challenge.order)
        n = rule.looks(n_max)[0]
        while True:
            ids = challenge.order[:n]
            scored: list[tuple[TrialRequest, list[Record]]] = []
            for who, purpose in ((challenge.incumbent, "incumbent"), (challenge.candidate, "challenge")):
                if todo := opt.missing(who, ids):
                    request = TrialRequest(who, todo, purpose)
                    scored.append((request, self.evaluate(request)))
            decision = rule.decide(opt.correct(challenge.candidate, ids), opt.correct(challenge.incumbent, ids),
                                   n_max, alpha)
            for i, (request, records) in enumerate(scored, 1):  # the decision goes with the look's last trial
                self.log(request, records, {**decision_log(decision), "sweep": challenge.sweep.number,
                                            "sweep_size": challenge.sweep.size} if i == len(scored) else {})
            if decision.verdict != "continue":
                if decision.verdict == "accept":
                    self.sweep_accepts[challenge.sweep.number] = self.sweep_accepts.get(challenge.sweep.number, 0) + 1
                return decision
            n = rule.next_n(n, n_max)

    def paired_scores(self, candidate: Candidate) -> tuple[float, float] | None:
        """(candidate, baseline) scores on the dev examples both were scored on; None if there are none."""
        opt = self.optimizer
        scored = opt.memo.get(opt.baseline.id, {})
        ids = [i for i in opt.dev_ids_of(candidate) if i in scored]
        return (opt.score_on(candidate, ids), opt.score_on(opt.baseline, ids)) if ids else None

    def strategy_ranking(self) -> list[Candidate]:
        """The strategy's ranking without the candidates the admission refused."""
        return [c for c in self.optimizer.ranking() if c.id not in self.rejected]

    def merged(self) -> Iterator[Candidate]:
        """The strategy's ranking with the baseline placed by paired dev score (`place_baseline`):
        first the prompts that beat the baseline on the dev examples both were scored on (strictly:
        the baseline wins ties), in the strategy's order; then the baseline; then the rest."""
        opt = self.optimizer
        return place_baseline(self.strategy_ranking(), opt.baseline, self.paired_scores)

    def ranking(self) -> list[Candidate]:
        """The merged ranking (`merged`), leader first; it always holds the baseline."""
        return list(self.merged())

    def leader_score(self) -> tuple[float, int] | None:
        """The merged leader's dev score and example count; None before it has any dev score."""
        leader = next(self.merged())
        ids = self.optimizer.dev_ids_of(leader)
        return (self.optimizer.score_on(leader, ids), len(ids)) if ids else None

    def log(self, request: TrialRequest, records: list[Record], facts: dict[str, Any]) -> None:
        """One trial in the log; a refused candidate's request is no trial (no call was made)."""
        if request.candidate.id in self.rejected:
            return
        space = self.optimizer.context.space
        trial = {
            "number": self.number,
            "candidate_id": request.candidate.id,
            "purpose": request.purpose,
            "dimensions": request.candidate.values(space),
            "n": len(records),
            "score": self.optimizer.context.score(records),
            "accuracy": sum(r.correct for r in records) / len(records),
            "budget_spent": self.evaluator.ledger.calls,
            "tokens_spent": self.evaluator.ledger.tokens,
            **facts,
        }
        if not request.candidate.assignment:  # outside the grid: the whole spec, so the log can rebuild it
            trial["instruction"] = request.candidate.spec.instruction
            trial["demo_ids"] = list(request.candidate.spec.demo_ids)
            trial["spec"] = asdict(request.candidate.spec)
        if (leader := self.leader_score()) is not None:
            self.anytime.append((self.evaluator.ledger.calls, leader[0]))
            trial["best_so_far"] = leader[0]
            self.note_leader(next(self.merged()))
        self.storage.append(trial)
        if self.on_trial:
            self.on_trial(trial)
        self.number += 1

    def note_leader(self, leader: Candidate) -> None:
        """The leader and the spend at which it took the lead (compare tests each arm's pick at equal spend)."""
        if not self.leaders or self.leaders[-1][2] != leader.spec:
            self.leaders.append((self.evaluator.ledger.calls, self.evaluator.ledger.tokens, leader.spec))

    def baseline_topup(self) -> None:
        """The baseline on the dev examples of the strategy's leader, then of the merged leader until it
        has all of them, so that the leader's comparison with the baseline is paired on all its examples."""
        opt = self.optimizer
        self.topup_for(next(iter(self.strategy_ranking()), opt.baseline))
        while self.topup_for(next(self.merged())):
            pass

    def topup_for(self, leader: Candidate) -> bool:
        """Score the baseline on the dev examples of `leader` it lacks; False when there were none."""
        opt = self.optimizer
        todo = () if leader.id == opt.baseline.id else opt.missing(opt.baseline, opt.dev_ids_of(leader))
        if todo:
            request = TrialRequest(opt.baseline, todo, "baseline top-up")
            self.log(request, self.evaluate(request), {})
        return bool(todo)

    def outcome(self, stopped_by_budget: bool, interrupted: bool = False) -> SearchOutcome:
        opt = self.optimizer
        try:
            if not interrupted:  # a stopped search makes no further call
                self.baseline_topup()
        except BudgetExhausted:
            stopped_by_budget = True
        ranking = self.ranking()
        leader_ids = opt.dev_ids_of(ranking[0])
        paired = [i for i in leader_ids if i in opt.memo.get(opt.baseline.id, {})]

        def score(candidate: Candidate, ids: list[str]) -> float:
            return opt.score_on(candidate, ids) if ids else float("nan")  # never scored on dev
        leader_score = score(ranking[0], leader_ids)
        if leader_ids and (not self.anytime or self.anytime[-1][1] != leader_score):
            # The strategy's last ranking came after the last trial (sh ranks its final round when asked
            # for more): the curve ends at the leader handed on.
            self.anytime.append((self.evaluator.ledger.calls, leader_score))
        self.note_leader(ranking[0])
        return SearchOutcome(
            ranking=ranking, family=opt.family(),
            leader_dev_score=leader_score, leader_dev_n=len(leader_ids),
            baseline_dev_score=score(opt.baseline, paired), baseline_dev_n=len(paired),
            n_trials=self.number, n_candidates=len(self.seen), stopped_by_budget=stopped_by_budget,
            anytime=self.anytime, notes=opt.report_lines(), challenges=sum(self.sweep_use.values()),
            sweeps=len(self.sweep_use), challenge_accepts=sum(self.sweep_accepts.values()),
            sweeps_with_accept=len(self.sweep_accepts), interrupted=interrupted, leaders=self.leaders,
            rejected=dict(Counter(self.rejected.values())), scored=self.scored_prompts())

    def scored_prompts(self) -> list[ScoredPrompt]:
        """Every admitted candidate scored on dev, with its prompt tokens and its dev objective."""
        opt = self.optimizer
        return [ScoredPrompt(c.id, self.admission.tokens(c.spec), opt.score_on(c, ids), len(ids))
                for c in self.seen.values() if (ids := opt.dev_ids_of(c))]


def run_search(optimizer: Optimizer, evaluator: Evaluator, storage: TrialStorage,
               on_trial: Callable[[dict], None] | None = None,
               should_stop: Callable[[], bool] | None = None) -> SearchOutcome:
    """Drive `optimizer` to the end of its search or of the budget, or until `should_stop()` says so."""
    return SearchDriver(optimizer, evaluator, storage, on_trial, should_stop).run()
