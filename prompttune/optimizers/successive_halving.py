"""Successive halving: many candidates on few examples, the best 1/η on more, and so on.

Round r scores every survivor on a fresh block of dev examples — the same block for all
survivors, so comparisons stay paired — and ranks them on all blocks seen so far. The preset
`seed` reproduces the schedule 1,440×20 → 360×40 → 90×80 → 22×160 → 5×500 exactly.

Example, on the synthetic oracle (a test device, `prompttune.testing.OracleProblem`: a
prompt is better, 0.85 against 0.55, when its instruction says 'Pick' or it carries 2+ demos)::

    >>> from prompttune.testing import OracleProblem
    >>> import prompttune
    >>> problem = OracleProblem.colours()
    >>> run = prompttune.optimize(problem.task, optimizer="sh", budget=600,
    ...                           space=problem.space, backend=problem.backend, record=False)
    >>> run.strategy.optimizer.schedule, run.ledger.calls  # (candidates, dev examples) per round, filling the budget
    ([(10, 20), (3, 100)], 600)
    >>> run.outcome.leader.values(problem.space)
    {'field': 'Text: {}', 'output': 'Colour: {}', 'verb': 'Pick'}

On a real task (PROMPTTUNE_DATA_DIR=../shared/data; or from Python,
``prompttune.optimize("agnews", optimizer="sh", budget=2000, options={"eta": 3})``)::

    optimize --task agnews --optimizer sh --budget 2000 --option eta=3
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from prompttune.core.errors import UserError
from prompttune.core.types import Record
from prompttune.optimizers.search_helpers import rank_by_score
from prompttune.optimizers.strategy_contract import (
    Optimizer,
    OptimizerOptions,
    SearchContext,
    TrialRequest,
    validate_options,
)
from prompttune.search_spaces.space import Candidate

SEED_SCHEDULE = ((1440, 20), (360, 40), (90, 80), (22, 160), (5, 500))


def auto_schedule(budget: int, n_dev: int, space_size: int, eta: int, min_examples: int) -> list[tuple[int, int]]:
    """Blocks grow by η and must fit the dev split; the first round's width fills the budget."""
    blocks = []
    n, used = min_examples, 0
    while used + n <= n_dev:
        blocks.append(n)
        used += n
        n *= eta
    if not blocks:
        blocks = [n_dev]
    if used < n_dev:
        blocks[-1] += n_dev - used  # the last round sees the rest of dev
    def widths(k0: int) -> list[int]:
        return [max(1, math.ceil(k0 / eta**r)) for r in range(len(blocks))]

    # Keep room to score the baseline on every block for the final paired verdict.
    budget -= n_dev - blocks[0]
    k0 = 2
    while k0 < space_size and sum(k * b for k, b in zip(widths(k0 + 1), blocks)) <= budget:
        k0 += 1
    schedule = list(zip(widths(k0), blocks))
    if len(schedule) > 1:  # ceil's steps leave budget over: it widens the last round, up to the one before
        (k_last, b_last), k_before = schedule[-1], schedule[-2][0]
        left = budget - sum(k * b for k, b in schedule)
        schedule[-1] = (min(k_before, k_last + max(0, left) // b_last), b_last)
    return schedule


class SHOptions(OptimizerOptions):
    eta: int = Field(4, ge=2, description="keep the best 1/eta each round; blocks grow by eta")
    min_examples: int = Field(20, ge=1, description="examples per candidate in the first round")
    schedule: Literal["auto", "seed"] = Field("auto", description="auto fills the budget; seed is 1,440×20 → … → 5×500")



class SuccessiveHalving(Optimizer):
    name = "sh"
    Options = SHOptions

    @classmethod
    def check(cls, context: SearchContext) -> None:
        cls.plan(context, validate_options(cls.name, cls.Options, context.options))

    @staticmethod
    def plan(context: SearchContext, options: SHOptions) -> list[tuple[int, int]]:
        """The rounds (candidates, examples): the preset, or one that fills the budget and dev split."""
        dev = context.dev_ids
        if options.schedule == "seed":
            schedule = list(SEED_SCHEDULE)
        else:
            schedule = auto_schedule(context.budget, len(dev), context.space.size().value, options.eta,
                                     options.min_examples)
        if sum(n for _, n in schedule) > len(dev):
            raise UserError(f"sh: schedule needs {sum(n for _, n in schedule)} dev examples, "
                            f"dev has {len(dev)} (raise --dev-size)")
        return schedule

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.schedule = self.plan(self.context, self.options)
        self.round = 0
        self.survivors = self.context.space.distinct_candidates(self.rng, self.schedule[0][0], first=[self.baseline])
        self.n_initial = len(self.survivors)
        self.ranked: list[Candidate] = []
        self.block_start = 0

    def _finished_ids(self) -> list[str]:
        """Dev examples of all finished rounds: every current survivor has scores on them."""
        return self.context.dev_ids[: sum(n for _, n in self.schedule[: self.round])]

    def ask(self) -> TrialRequest | None:
        if self.round < len(self.schedule):
            block = self.context.dev_ids[self.block_start:self.block_start + self.schedule[self.round][1]]
            for candidate in self.survivors:
                todo = self.missing(candidate, block)
                if todo:
                    return TrialRequest(candidate, todo, f"round {self.round + 1}")
            self._advance()
            return self.ask()
        return None

    def upcoming(self) -> list[TrialRequest]:
        """The rest of this round: every survivor on the round's block."""
        if self.round >= len(self.schedule):
            return []
        block = self.context.dev_ids[self.block_start:self.block_start + self.schedule[self.round][1]]
        return [TrialRequest(c, todo, f"round {self.round + 1}") for c in self.survivors
                if (todo := self.missing(c, block))]

    def _advance(self) -> None:
        self.block_start += self.schedule[self.round][1]
        self.round += 1
        ids = self._finished_ids()
        self.ranked = rank_by_score([(c, self.score_on(c, ids)) for c in self.survivors], self.baseline)
        self.survivors = self.ranked
        if self.round < len(self.schedule):
            width = self.schedule[self.round][0]
            # The budget keeps the baseline's top-up in reserve; a surviving baseline frees it for one more.
            width += any(c.id == self.baseline.id for c in self.survivors[:width])
            self.survivors = self.survivors[:width]

    def tell(self, request: TrialRequest, records: list[Record]) -> dict[str, Any]:
        return {"round": min(self.round + 1, len(self.schedule))}

    def ranking(self) -> list[Candidate]:
        """Survivors of the last finished round, by score on all its examples (baseline wins ties)."""
        return self.ranked

    def family(self) -> int:
        return self.n_initial

    def report_lines(self) -> list[str]:
        """Cost against the grid: every first-round candidate at the final round's example count."""
        cost = sum(k * n for k, n in self.schedule)
        width, final_n = self.schedule[0][0], self.schedule[-1][1]
        rounds = " → ".join(f"{k}×{n}" for k, n in self.schedule)
        return [f"Successive halving schedule {rounds}: {cost} calls, {cost / (width * final_n):.1%} "
                f"of the grid-equivalent cost ({width} candidates × {final_n} examples = "
                f"{width * final_n} calls); {self.round} of {len(self.schedule)} rounds finished."]
