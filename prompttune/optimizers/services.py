"""Driver services any strategy can use to size its stages to the cap: what the cache charges for scoring
prompts, and how far a share of the budget goes. A strategy that plans ahead (how many draws a screen pays
for, how long a final dev prefix it can afford, what to keep back for a later stage) asks these rather than
modelling the ledger itself; the budget itself is `SearchContext.remaining()`."""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from prompttune.optimizers.strategy_contract import SearchContext
from prompttune.search_spaces.space import Candidate


def calls_to_score(texts: Iterable[Iterable[Candidate]], ids: Sequence[str],
                   missing: Callable[[Candidate, Sequence[str]], Sequence[str]]) -> int:
    """Model calls that scoring each prompt text on `ids` costs, as the cache charges them: the model answers
    one text once per example, so the candidates given together (a prompt and its label-offset twins, whose
    answers are the prompt's) pay only for the examples none of them has answered (`missing`)."""
    wanted = set(ids)
    return sum(len(wanted.intersection(*(missing(c, ids) for c in members))) for members in texts)


def stage_reserve(context: SearchContext, share: float, cost: int) -> int:
    """Calls kept back for a later stage: its `share` of the budget, or its whole `cost` where that is less,
    so a stage that cannot spend its share leaves the rest to the stages before it."""
    return min(int(share * context.budget), cost)


def free_calls(context: SearchContext, reserve: int) -> int:
    """Calls the current stage may still spend before it reaches a later stage's `reserve`."""
    return context.budget - reserve - context.spent()


def most_affordable(start: int, cost: Callable[[int], float], allowance: float | None,
                    stop: int | None = None) -> int:
    """The largest size from `start` (`start` itself even if unaffordable; at most `stop`) whose `cost` the
    `allowance` pays for, grown one at a time; without an allowance (no cap), `stop`."""
    if allowance is None and stop is None:
        raise ValueError("most_affordable needs an allowance or a stop")
    size = start
    while (stop is None or size < stop) and (allowance is None or cost(size + 1) <= allowance):
        size += 1
    return size
