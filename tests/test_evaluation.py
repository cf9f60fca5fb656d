"""Evaluator, cache and ledger: hits are free, the cap is hard, the ledger equals real calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from prompttune.core.errors import BudgetExhausted
from prompttune.optimizers.proposer import Proposer
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import Evaluator
from prompttune.scoring.extraction import extract_label
from prompttune.scoring.ledger import BudgetLedger
from prompttune.search_spaces import default_space
from prompttune.testing import SyntheticOracleBackend, synthetic_task
from tests.support import CountingBackend


def _setup(cap: int | None, cache: ResultCache | None = None):
    task = synthetic_task()
    examples = [e for split in task.splits.values() for e in split]
    backend = CountingBackend(SyntheticOracleBackend(examples, lambda text: 0.7))
    visible = {e.id: e for s in ("train", "dev") for e in task.splits[s]}
    ledger = BudgetLedger(cap_calls=cap)
    evaluator = Evaluator(backend, visible, {e.id: e for e in task.splits["train"]},
                          cache if cache is not None else ResultCache(), ledger)
    return task, backend, ledger, evaluator


def test_cache_hit_costs_no_budget_and_persists(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path / "c.sqlite")
    task, backend, ledger, evaluator = _setup(None, cache)
    spec = default_space(task).default_candidate().spec
    dev = [e.id for e in task.splits["dev"]][:20]
    first = evaluator.evaluate(spec, dev)
    again = evaluator.evaluate(spec, dev)
    assert ledger.calls == backend.calls == 20
    assert [r.pred for r in first] == [r.pred for r in again] and all(r.cached for r in again)
    cache.close()
    _, backend2, ledger2, evaluator2 = _setup(None, ResultCache(tmp_path / "c.sqlite"))
    evaluator2.evaluate(spec, dev)
    assert ledger2.calls == backend2.calls == 0


class _MissesOnce(ResultCache):
    """A TEST DEVICE: its first lookup finds nothing, as when another process stores the same keys
    between this process's lookup and its write."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.lookups = 0

    def get_many(self, keys: list[str]) -> dict:
        self.lookups += 1
        return {} if self.lookups == 1 else super().get_many(keys)


def test_two_processes_missing_one_key_both_read_the_first_answer_stored(tmp_path: Path) -> None:
    task, _, _, first = _setup(None, ResultCache(tmp_path / "c.sqlite"))
    spec = default_space(task).default_candidate().spec
    dev = [e.id for e in task.splits["dev"]][:40]
    stored = [r.pred for r in first.evaluate(spec, dev)]
    examples = [e for split in task.splits.values() for e in split]
    other_model = CountingBackend(SyntheticOracleBackend(examples, lambda text: 0.2))  # same id, other answers
    late = Evaluator(other_model, {e.id: e for e in task.splits["dev"]}, {e.id: e for e in task.splits["train"]},
                     _MissesOnce(tmp_path / "c.sqlite"), BudgetLedger())
    assert [r.pred for r in late.evaluate(spec, dev)] == stored and other_model.calls == 40


def test_values_read_are_kept_but_a_key_missed_is_read_again_and_the_first_value_stays(tmp_path: Path) -> None:
    """The in-memory copy of values read never hides what another process stores later, nor lets a second store
    of a key win: what a reader gets is always the file's first value."""
    reader, writer = ResultCache(tmp_path / "c.sqlite"), ResultCache(tmp_path / "c.sqlite")
    writer.put_many([("a", {"logprobs": [0.0]})])
    assert reader.get_many(["a", "b"]) == {"a": {"logprobs": [0.0]}}
    writer.put_many([("b", {"logprobs": [1.0]}), ("a", {"logprobs": [9.0]})])
    reader.put_many([("a", {"logprobs": [7.0]})])
    assert reader.get_many(["a", "b"]) == {"a": {"logprobs": [0.0]}, "b": {"logprobs": [1.0]}}
    assert ResultCache(tmp_path / "c.sqlite").get_many(["a"]) == {"a": {"logprobs": [0.0]}}


def test_cap_is_hard_and_ledger_equals_backend_calls() -> None:
    task, backend, ledger, evaluator = _setup(cap=50)
    space = default_space(task)
    dev = [e.id for e in task.splits["dev"]]
    evaluator.evaluate(space.default_candidate().spec, dev[:30])
    with pytest.raises(BudgetExhausted, match="30 calls requested, 20 left"):
        evaluator.evaluate(space.build({**space.default, "intra_separator": 1}).spec, dev[:30])
    evaluator.evaluate(space.build({**space.default, "intra_separator": 1}).spec, dev[:20])
    assert ledger.calls == backend.calls == 50
    assert ledger.tokens > 0
    with pytest.raises(BudgetExhausted):
        Proposer(backend, evaluator.meter)("write an instruction")
    assert backend.calls == 50


def test_test_examples_are_invisible_to_the_search_evaluator() -> None:
    task, _, _, evaluator = _setup(None)
    spec = default_space(task).default_candidate().spec
    with pytest.raises(PermissionError, match="not visible"):
        evaluator.evaluate(spec, [task.splits["test"][0].id])


@pytest.mark.parametrize("text,expected", [
    ("Sports", 1), ("the answer is sports.", 1), ("World and Sports", None), ("nothing", None),
    ("worldwide news", None), ("SCI/TECH", 3), ("Sci/Tech stuff", 3),
])
def test_extraction_rule(text: str, expected: int | None) -> None:
    assert extract_label(text, ["World", "Sports", "Business", "Sci/Tech"]) == expected


def test_cot_extraction_reads_the_final_answer_only() -> None:
    words = ["negative", "positive"]
    assert extract_label("Not negative at all. Final answer: positive", words, cot=True) == 1
    assert extract_label("It is positive.", words, cot=True) is None
