"""The driver services strategies size their stages with (`optimizers/services.py`), the budget a strategy reads
through `SearchContext.remaining()`, and the demo-pool policy (`search_spaces/demo_pool.py`)."""

from __future__ import annotations

from typing import Sequence

from prompttune.core.types import Example
from prompttune.optimizers.services import calls_to_score, free_calls, most_affordable, stage_reserve
from prompttune.optimizers.strategy_contract import SearchContext, spec_candidate
from prompttune.scoring.ledger import BudgetLedger
from prompttune.search_spaces.demo_pool import demo_ids_like_dev
from prompttune.search_spaces.space import Candidate
from prompttune.testing import OracleProblem


def _context(budget: int) -> SearchContext:
    problem = OracleProblem.colours()
    return SearchContext(problem.space, [], [ex.id for ex in problem.task.splits["dev"]], n_classes=3, budget=budget)


def test_remaining_reads_the_ledger_the_driver_binds_and_none_before() -> None:
    context = _context(100)
    assert context.remaining() is None and context.spent() == 0
    context.ledger = BudgetLedger(cap_calls=100, calls=30)
    assert context.remaining() == 70 and context.spent() == 30
    assert free_calls(context, stage_reserve(context, 0.4, 1000)) == 30  # 100 - 40 kept back - 30 spent
    assert stage_reserve(context, 0.4, 25) == 25  # a stage that cannot spend its share keeps back its cost


def test_the_cache_charges_a_text_once_per_example_none_of_its_variants_answered() -> None:
    space = OracleProblem.colours().space
    raw, twin, other = (spec_candidate(space.default_candidate().spec.with_updates(label_bias=bias), "t")
                        for bias in ((), (0.1, 0.0, 0.0), (0.2, 0.0, 0.0)))
    answered = {raw.id: {"a", "b"}, twin.id: {"a", "c"}, other.id: set()}

    def missing(candidate: Candidate, ids: Sequence[str]) -> tuple[str, ...]:
        return tuple(i for i in ids if i not in answered[candidate.id])
    # raw and its twin share one text: only "d" is unanswered by both; `other` pays for all four; nothing built: four
    assert calls_to_score([[raw, twin], [other], []], ["a", "b", "c", "d"], missing) == 1 + 4 + 4


def test_most_affordable_grows_while_the_allowance_pays_and_stops_at_stop() -> None:
    assert most_affordable(3, lambda n: 10 * n, 65) == 6
    assert most_affordable(3, lambda n: 10 * n, 5) == 3  # the start even where it does not pay
    assert most_affordable(2, lambda n: n, None, stop=9) == 9


def test_demos_come_from_train_inputs_as_long_as_the_middle_half_of_the_dev_inputs() -> None:
    pool = [Example(f"s{i}", {"text": "short"}, i % 2) for i in range(8)] + \
           [Example(f"l{i}", {"text": "a much longer input here"}, i % 2) for i in range(8)]
    train_ids = [e.id for e in pool]
    assert demo_ids_like_dev(pool, train_ids, [5, 5, 5, 5], 2) == [f"l{i}" for i in range(8)]
    assert demo_ids_like_dev(pool, train_ids, [], 2) == train_ids  # dev lengths unknown
    assert demo_ids_like_dev(pool, train_ids, [5, 5, 5, 5], 3) == train_ids  # a class missing: all of train
