"""MIPRO-style search (after DSPy's MIPROv2): proposed instructions × demo sets × format, by TPE.

Instruction candidates come from the proposer, grounded in a dataset summary, sample demos and
a random style tip; demo sets come from bootstrapping; any other dimensions of the space join
the search. Optuna's multivariate TPE picks combinations scored on minibatches; every
`full_eval_every` trials the best-by-minibatch candidate gets a full dev evaluation, and the best
full evaluation leads; its family counts every candidate TPE tried, since the minibatches
pre-selected it. Unlike DSPy, all trials in one period share one minibatch, so their
comparisons are paired. Trials go on while the cap pays for one more and its full evaluation; the
calls left then fully evaluate the next candidates by minibatch score, so a capped run spends its cap
(at 2,000 calls it used to stop at 84% of it).

Example, on the synthetic oracle (a test device, `prompttune.testing.OracleProblem`: a
prompt is better, 0.85 against 0.55, when its instruction says 'Pick' or it carries 2+ demos)::

    >>> from prompttune.testing import OracleProblem
    >>> import prompttune
    >>> problem = OracleProblem.colours()
    >>> run = prompttune.optimize(problem.task, optimizer="mipro", budget=1000,
    ...                           space=problem.space, backend=problem.backend, record=False)
    >>> run.strategy.optimizer.instructions[:2]  # the baseline's, then the proposer's (duplicates dropped)
    ['Name the colour of the item ({labels}).', 'Pick the colour of the item ({labels}).']
    >>> leader = run.outcome.leader
    >>> leader.spec.instruction, len(leader.spec.demo_ids), run.ledger.calls
    ('Name the colour of the item ({labels}).', 4, 985)

On a real task (PROMPTTUNE_DATA_DIR=../shared/data; or from Python,
``prompttune.optimize("agnews", optimizer="mipro", budget=2000, options={"minibatch": 25})``)::

    optimize --task agnews --optimizer mipro --budget 2000 --option minibatch=25
"""

from __future__ import annotations

import copy
from typing import Any

import optuna
from pydantic import Field

from prompttune.core.types import Record
from prompttune.optimizers.search_helpers import (
    STYLE_TIPS,
    instruction_request,
    rank_by_score,
    rotating_minibatch,
    shuffled_demo_sets,
)
from prompttune.optimizers.strategy_contract import Optimizer, OptimizerOptions, TrialRequest, spec_candidate
from prompttune.search_spaces.space import Candidate

optuna.logging.set_verbosity(optuna.logging.WARNING)


class MiproOptions(OptimizerOptions):
    instructions: int = Field(5, ge=1, description="instruction candidates (the baseline's included)")
    demo_sets: int = Field(4, ge=1, description="demo sets (zero-shot included)")
    minibatch: int = Field(25, ge=1, description="dev examples per TPE trial")
    full_eval_every: int = Field(6, ge=1, description="trials between full dev evaluations of the leader")
    trials: int = Field(200, ge=1, description="most TPE trials")
    bootstrap_pool: int = Field(48, ge=1, description="train examples the baseline answers to find demos")



class Mipro(Optimizer):
    name = "mipro"
    Options = MiproOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pool_ids = self.context.train_ids[: self.options.bootstrap_pool]
        space = self.context.space
        # Dimensions that write the instruction are replaced by the proposed instruction pool.
        self.format_dims = [d for d in space.dimensions
                            if d.target != "instruction" and not d.target.startswith("slot:")]
        self.instructions: list[str] | None = None
        self.demo_sets: list[tuple[str, ...]] = []
        self.study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(
            multivariate=True, seed=self.context.seed))
        self.trials_done = 0
        self.period = 0
        self.minibatch_scores: dict[str, list[float]] = {}
        self.candidates: dict[str, Candidate] = {}
        self.full_scores: dict[str, float] = {}
        self.pending: tuple[Candidate, optuna.trial.Trial] | None = None

    # -- set-up: bootstrap demos, then propose instructions ----------------------------------
    def _bootstrap_demo_sets(self) -> None:
        solved = [i for i in self.pool_ids if self.memo[self.baseline.id][i].correct]
        self.demo_sets = [(), *shuffled_demo_sets(solved, self.rng, self.options.demo_sets - 1, 4)]

    def _propose_instructions(self) -> list[str]:
        """The baseline's instruction (even the minimal ""), then one summary call and one call per
        proposed instruction; invalid proposals are dropped. With instructions=1, no call at all."""
        assert self.proposer is not None
        base = self.baseline.spec
        pool = [base.instruction]
        if self.options.instructions == 1:
            return pool
        examples = [self.memo[self.baseline.id][i] for i in self.pool_ids[:4]]
        shown = "\n".join(f"- {self.example_text(r.example_id)} -> {base.label_words[r.gold]}" for r in examples)
        summary = self.proposer(f"Here are labelled examples from a dataset:\n{shown}\n"
                                "Describe in one sentence what task these examples come from.")
        # The first instructions - 1 proposals are asked whatever they say: written together in one batched
        # call, with the style tips the loop below will draw (read from a copy of the random state).
        peek = copy.deepcopy(self.rng)
        tips = [STYLE_TIPS[int(peek.integers(len(STYLE_TIPS)))] for _ in range(self.options.instructions - 1)]
        self.proposer.prefetch([instruction_request(shown, base.label_words, tip, summary.strip()) for tip in tips])
        for _ in range(2 * self.options.instructions):
            if len(pool) >= self.options.instructions:
                break
            tip = STYLE_TIPS[int(self.rng.integers(len(STYLE_TIPS)))]
            text = self.usable_rewrite(self.proposer(instruction_request(shown, base.label_words, tip, summary.strip())),
                                       base)
            if text is not None and text not in pool:
                pool.append(text)
        return pool

    # -- ask / tell ---------------------------------------------------------------------------
    def _minibatch(self) -> tuple[str, ...]:
        return rotating_minibatch(self.context.dev_ids, self.period, self.options.minibatch)

    def _trial_candidate(self, trial: optuna.trial.Trial) -> Candidate:
        space = self.context.space
        instruction = self.instructions[trial.suggest_categorical("instruction", list(range(len(self.instructions))))]
        demos = self.demo_sets[trial.suggest_categorical("demos", list(range(len(self.demo_sets))))]
        assignment = dict(space.default)
        for dim in self.format_dims:
            assignment[dim.name] = trial.suggest_categorical(dim.name, list(range(len(dim.values))))
        grid = space.build(assignment) if space.is_valid(assignment) else self.baseline
        spec = grid.spec.with_updates(instruction=instruction, demo_ids=demos)
        return spec_candidate(spec, "mipro")

    def ask(self) -> TrialRequest | None:
        dev = tuple(self.context.dev_ids)
        if todo := self.missing(self.baseline, dev):
            return TrialRequest(self.baseline, todo, "baseline")
        if todo := self.missing(self.baseline, self.pool_ids):
            return TrialRequest(self.baseline, todo, "bootstrap")
        if self.instructions is None:
            self._bootstrap_demo_sets()
            self.instructions = self._propose_instructions()
        remaining = self.context.remaining()
        # A trial costs its minibatch now and at most the rest of the dev split for its full evaluation
        # (its minibatch is part of dev): the trials stop when the cap no longer pays for both, and a
        # periodic full evaluation waits for the closing one when the trials could not go on after it.
        last_chance = remaining is not None and remaining < len(dev)
        if self.trials_done and self.trials_done % self.options.full_eval_every == 0 and self._needs_full_eval():
            leader = self._minibatch_leader()
            if remaining is None or remaining - len(self.missing(leader, dev)) >= len(dev):
                return TrialRequest(leader, dev, "full eval")
        if self.trials_done >= self.options.trials or last_chance:
            return self._closing_full_eval(dev, remaining)
        trial = self.study.ask()
        candidate = self._trial_candidate(trial)
        self.pending = (candidate, trial)
        return TrialRequest(candidate, self._minibatch(), "minibatch")

    def _closing_full_eval(self, dev: tuple[str, ...], remaining: int | None) -> TrialRequest | None:
        """After the trials: the minibatch leader's full dev evaluation, then, with a budget cap, those of
        the next candidates by minibatch score while the cap pays for them, so the calls left when the
        trials stop still test a candidate instead of going unspent."""
        if self._needs_full_eval():
            return TrialRequest(self._minibatch_leader(), dev, "full eval")
        if remaining is None:
            return None
        for candidate_id in sorted(self.minibatch_scores, key=lambda i: -self._minibatch_mean(i)):
            todo = self.missing(self.candidates[candidate_id], dev)
            if candidate_id not in self.full_scores and len(todo) <= remaining:
                return TrialRequest(self.candidates[candidate_id], dev, "full eval")
        return None

    def _minibatch_mean(self, candidate_id: str) -> float:
        scores = self.minibatch_scores[candidate_id]
        return sum(scores) / len(scores)

    def _minibatch_leader(self) -> Candidate:
        return self.candidates[max(self.minibatch_scores, key=self._minibatch_mean)]

    def _needs_full_eval(self) -> bool:
        return bool(self.minibatch_scores) and self._minibatch_leader().id not in self.full_scores

    def tell(self, request: TrialRequest, records: list[Record]) -> dict[str, Any]:
        score = self.context.score(records)
        if request.purpose == "minibatch" and self.pending:
            candidate, trial = self.pending
            self.study.tell(trial, score)
            self.candidates[candidate.id] = candidate
            self.minibatch_scores.setdefault(candidate.id, []).append(score)
            self.trials_done += 1
            self.pending = None
            return {"trial": trial.number, "period": self.period}
        if request.purpose == "full eval":
            self.full_scores[request.candidate.id] = score
            self.period += 1
            return {"full_eval": True}
        return {}

    def ranking(self) -> list[Candidate]:
        """Fully evaluated candidates and the baseline by full dev score (the baseline wins ties)."""
        dev = self.context.dev_ids
        if self.missing(self.baseline, dev):
            return []
        scored = [(self.baseline, self.score_on(self.baseline, dev)),
                  *((self.candidates[i], score) for i, score in self.full_scores.items())]
        return rank_by_score(scored, self.baseline)

    def family(self) -> int:
        return 1 + len(self.candidates)

    def report_lines(self) -> list[str]:
        return [f"MIPRO: {len(self.instructions or [])} instructions × {len(self.demo_sets)} demo sets × "
                f"{len(self.format_dims)} format dimensions; {self.trials_done} TPE minibatch trials of "
                f"{self.options.minibatch} examples, {len(self.full_scores)} full dev evaluations.",
                *(f"- instruction {i}: {text!r}" for i, text in enumerate(self.instructions or []))]
