"""BFRS — bootstrapped few-shot with random search (after DSPy's BootstrapFewShotWithRandomSearch).

Candidate programs: zero-shot, labeled-only demos, an unshuffled bootstrap, and shuffled
bootstraps with k in 1..max_demos. A bootstrap keeps train examples the current prompt answers
correctly as demos. Every program is scored on the full dev split and ranked by its score; the
held-out verdict decides whether the leader ships.

Example, on the synthetic oracle (a test device, `prompttune.testing.OracleProblem`: a
prompt is better, 0.85 against 0.55, when its instruction says 'Pick' or it carries 2+ demos)::

    >>> from prompttune.testing import OracleProblem
    >>> import prompttune
    >>> problem = OracleProblem.colours()
    >>> run = prompttune.optimize(problem.task, optimizer="bfrs", budget=1000,
    ...                           space=problem.space, backend=problem.backend, record=False)
    >>> len(run.strategy.optimizer.programs), run.ledger.calls  # zero-shot, labeled, bootstrap and 5 shuffled programs
    (8, 900)
    >>> leader = run.outcome.leader
    >>> leader.spec.instruction, len(leader.spec.demo_ids), round(run.outcome.leader_dev_score, 3)
    ('Name the colour of the item ({labels}).', 4, 0.858)

On a real task (PROMPTTUNE_DATA_DIR=../shared/data; or from Python,
``prompttune.optimize("agnews", optimizer="bfrs", budget=2000, options={"max_demos": 4})``)::

    optimize --task agnews --optimizer bfrs --budget 2000 --option max_demos=4
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from prompttune.core.types import Record
from prompttune.optimizers.search_helpers import rank_by_score, shuffled_demo_sets
from prompttune.optimizers.strategy_contract import Optimizer, OptimizerOptions, TrialRequest, spec_candidate
from prompttune.search_spaces.space import Candidate


class BFRSOptions(OptimizerOptions):
    max_demos: int = Field(4, ge=1, description="most demos in one program")
    programs: int = Field(8, ge=2, description="programs scored on dev, the zero-shot baseline included")
    bootstrap_pool: int = Field(64, ge=1, description="train examples the baseline answers to find demos")



class BootstrapFewShotRandomSearch(Optimizer):
    name = "bfrs"
    Options = BFRSOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pool_ids = self.context.train_ids[: self.options.bootstrap_pool]
        self.programs: list[Candidate] | None = None
        self.scored: list[tuple[Candidate, float]] = []

    def _build_programs(self) -> list[Candidate]:
        """Zero-shot, labeled-only, unshuffled bootstrap, then shuffled bootstraps."""
        base = self.baseline.spec
        solved = [i for i in self.pool_ids if self.memo[self.baseline.id][i].correct]
        labeled = [str(i) for i in self.rng.choice(self.pool_ids, size=min(self.options.max_demos, len(self.pool_ids)),
                                                   replace=False)]
        demo_sets = [tuple(labeled), tuple(solved[: self.options.max_demos])]
        demo_sets += shuffled_demo_sets(solved, self.rng, self.options.programs - 1 - len(demo_sets), self.options.max_demos,
                                        taken=demo_sets)
        programs = [self.baseline]
        for origin, demos in zip(["labeled", "bootstrap"] + ["shuffled"] * len(demo_sets), demo_sets):
            candidate = spec_candidate(base.with_updates(demo_ids=demos), f"bfrs-{origin}")
            if demos and candidate.id not in {p.id for p in programs}:
                programs.append(candidate)
        return programs

    def ask(self) -> TrialRequest | None:
        todo = self.missing(self.baseline, self.pool_ids)
        if todo:
            return TrialRequest(self.baseline, todo, "bootstrap")
        if self.programs is None:
            self.programs = self._build_programs()
        dev = self.context.dev_ids
        for program in self.programs:
            if self.missing(program, dev):
                return TrialRequest(program, tuple(dev), "baseline" if program is self.baseline else "program")
        return None

    def tell(self, request: TrialRequest, records: list[Record]) -> dict[str, Any]:
        if request.purpose in ("program", "baseline"):
            self.scored.append((request.candidate, self.context.score(records)))
            return {"demos": len(request.candidate.spec.demo_ids)}
        return {}

    def ranking(self) -> list[Candidate]:
        """Programs scored on dev, best first (the zero-shot baseline wins ties)."""
        return rank_by_score(self.scored, self.baseline)

    def family(self) -> int:
        return len(self.scored)

    def report_lines(self) -> list[str]:
        solved = sum(self.memo.get(self.baseline.id, {}).get(i) is not None
                     and self.memo[self.baseline.id][i].correct for i in self.pool_ids)
        return [f"BFRS: {len(self.scored)} programs scored on dev; bootstrap pool {len(self.pool_ids)} "
                f"train examples, {solved} answered correctly by the zero-shot prompt (demo sources)."]
