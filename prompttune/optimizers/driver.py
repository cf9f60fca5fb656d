"""The driver: owns the decision protocol, the evaluator, the budget, the log, the anytime curve and the
baseline top-up for every strategy (`strategy_contract.py`). It merges the baseline into the strategy's ranking by paired
dev score (`SearchDriver.ranking`), so nothing handed on ranks above the baseline unless it beat it on the same
dev examples, and admits every candidate before it is scored (`admission.py`): a refused one is neither scored
nor charged and never ranked. The held-out verdict comes after (`prompttune.scoring.confirmation`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, replace
from typing import Any, Callable, Iterator

from prompttune.core.errors import BudgetExhausted
from prompttune.core.storage import TrialStorage
from prompttune.core.types import Record
from prompttune.optimizers.admission import Admission
from prompttune.optimizers.prefetch import Prefetch
from prompttune.optimizers.search_helpers import place_baseline
from prompttune.optimizers.strategy_contract import Challenge, Optimizer, TrialRequest
from prompttune.results.search_outcome import ScoredPrompt, SearchOutcome
from prompttune.scoring.evaluator import Evaluator
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.search_spaces.space import Candidate
from prompttune.statistics.stats import Decision, paired_compare


def decision_log(decision: Decision) -> dict[str, Any]:
    c = decision.comparison
    return {"decision": decision.verdict, "paired_n": decision.n, "b": c.b, "c": c.c,
            "p": round(decision.p_value, 6), "threshold": float(f"{decision.threshold:.3g}")}


class SearchStopped(Exception):
    """The run asked the search to stop: it ends before the next evaluation, never inside one."""


class SearchDriver:
    """Runs one optimizer: evaluates its requests, decides its challenges, logs every trial."""

    def __init__(self, optimizer: Optimizer, evaluator: Evaluator, storage: TrialStorage,
                 on_trial: Callable[[dict], None] | None = None,
                 should_stop: Callable[[], bool] | None = None) -> None:
        self.optimizer, self.evaluator, self.storage, self.on_trial = optimizer, evaluator, storage, on_trial
        self.should_stop = should_stop
        # The strategy reads the budget it is driven under; a copy, so a context shared by arms keeps no ledger.
        optimizer.context = replace(optimizer.context, ledger=evaluator.ledger)
        self.number = 0
        self.seen: dict[str, Candidate] = {}  # admitted candidates, scored on some examples
        self.rejected: dict[str, str] = {}  # candidate id -> why the admission refused it
        self.admission = Admission(evaluator.backend, evaluator.demo_pool, optimizer.context.space.frozen,
                                   optimizer.context.max_prompt_tokens, optimizer.context.serve)
        self.anytime: list[tuple[int, float]] = []
        self.leaders: list[tuple[int, int, PromptSpec]] = []  # (calls, tokens, spec) where each leader took over
        self.sweep_use: dict[int, int] = {}
        self.sweep_accepts: dict[int, int] = {}
        self.ahead = Prefetch(evaluator)  # the strategy's upcoming requests, answered by the model together

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
        """The candidate's records; a refused candidate costs no call and answers nothing (ranked last)."""
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
        """`request` and the strategy's `upcoming` requests answered by the model in one call (`Prefetch`)."""
        self.ahead.answer(request, self.optimizer.upcoming, self.admissible)

    def admissible(self, candidate: Candidate) -> bool:
        """Admitted, or one the admission would admit (a refusal is recorded only where it is asked for)."""
        return candidate.id in self.seen or (
            candidate.id not in self.rejected and self.admission.refusal(candidate.spec) is None)

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
        """The strategy's ranking with the baseline placed by paired dev score (`place_baseline`): first what
        beat it on the dev examples both were scored on (the baseline wins ties), then the baseline, the rest."""
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
