"""Big batches (issue 42): the backend gets a round, a race step, the screen and the held-out verdict in one
call each, while results stay those of asking one by one (tests/test_engine_equivalence.py holds the trial
logs to their recorded digests), and the run records how work reached the model."""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

import prompttune
from prompttune.backends.decode_cost import batch_decode_ratio, decoding_line
from prompttune.core.errors import BackendUnavailable
from prompttune.core.types import GenerateResult, ScoreResult
from prompttune.optimizers.driver import SearchDriver
from prompttune.optimizers.proposer import Proposer
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import Evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.metering import Meter
from prompttune.testing import OracleProblem
from tests.support import CountingBackend


class CallCounter(CountingBackend):
    """Counts backend calls (batches), not only the requests in them."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.batches = self.generate_batches = 0

    def score(self, requests):
        self.batches += 1
        return super().score(requests)

    def choose(self, requests):
        self.batches += 1
        return super().choose(requests)

    def generate(self, requests):
        self.batches += 1
        self.generate_batches += 1
        return super().generate(requests)


def test_a_successive_halving_round_and_the_verdict_reach_the_model_in_one_call_each(tmp_path: Path) -> None:
    problem = OracleProblem.colours()
    backend = CallCounter(problem.backend)
    run = prompttune.optimize(problem.task, optimizer="sh", budget=600, space=problem.space, backend=backend,
                              runs_dir=str(tmp_path), check_generation=0)  # the search and the verdict alone
    assert run.strategy.optimizer.schedule == [(10, 20), (3, 100)]
    # one call per round, the baseline's top-up on the last round's block, one for the verdict (both prompts);
    # asked one by one the rounds alone took 10 + 3 calls and the verdict 2
    assert backend.batches == 4
    assert run.search_ledger.calls == 600 and backend.calls == 600 + 2 * len(problem.task.splits["test"])
    use = json.loads((run.run_dir / "verdict.json").read_text())["backend_use"]
    assert use["calls"] == 4 and use["rows_per_call"] == backend.calls / 4
    assert "backend calls (" in (run.run_dir / "report.md").read_text()


def test_a_batch_asked_ahead_holds_about_ten_seconds_of_rows_and_changes_no_trial(monkeypatch) -> None:
    """`Meter.call_rows` bounds what a search asks ahead in one call: on a CPU the 40k job's screen would be
    one call of thousands of rows, minutes that Ctrl-C cannot cut short and a kill loses. Its trials are
    those of unbounded batches; sh's first round reaches the model two prompts at a time instead of ten."""
    meter = Meter(ResultCache(), BudgetLedger(cap_calls=10))
    assert meter.call_rows() == 256  # before any rate is measured
    meter.use.rows, meter.use.scoring_seconds = 300, 6.0
    assert meter.call_rows() == 500  # ten seconds at 50 rows/s
    meter.use.scoring_seconds = 60.0
    assert meter.call_rows() == 256  # never fewer: a slow server's pool still gets its slots' worth at once
    problem = OracleProblem.colours()

    def search(limit: float) -> tuple[list[dict], list[int]]:
        monkeypatch.setattr(Meter, "call_rows", lambda self: limit)
        backend, sizes = CallCounter(problem.backend), []
        score = backend.score
        backend.score = lambda requests: (sizes.append(len(requests)), score(requests))[1]
        run = prompttune.optimize(problem.task, optimizer="sh", serve="logprobs", budget=600, space=problem.space,
                                  backend=backend, record=False, check_generation=0)
        return run.trials.load(), sizes

    unbounded, unbounded_sizes = search(float("inf"))
    bounded, sizes = search(50)
    assert bounded == unbounded and (unbounded_sizes[0], sizes[0]) == (200, 40) and len(sizes) > len(unbounded_sizes)


def _reflect_run(monkeypatch, batched: bool) -> tuple[CallCounter, list[dict]]:
    if not batched:  # every request asked alone, as before batching
        monkeypatch.setattr(SearchDriver, "prefetch", lambda self, request: None)
        monkeypatch.setattr(Evaluator, "prefetch", lambda self, work: None)
    problem = OracleProblem.colours()
    backend = CallCounter(problem.backend)
    run = prompttune.optimize(problem.task, optimizer="reflect", budget=800, space=problem.space,
                              backend=backend, record=False, check_generation=0)
    monkeypatch.undo()
    assert run.backend_use["calls"] == backend.batches
    return backend, [*run.trials.load(), run.search_ledger.summary(), run.verdict.summary()]


def test_reflect_screens_and_races_in_batches_with_the_same_trials_and_charges(monkeypatch) -> None:
    alone, alone_log = _reflect_run(monkeypatch, batched=False)
    batched, batched_log = _reflect_run(monkeypatch, batched=True)
    assert batched_log == alone_log
    assert batched.calls == alone.calls  # the same requests reach the model, in fewer, larger calls
    assert batched.batches < 0.6 * alone.batches  # 18 against 34 here


def test_mipro_writes_the_proposals_it_will_ask_for_in_one_generate_call() -> None:
    problem = OracleProblem.colours()
    backend = CallCounter(problem.backend)
    run = prompttune.optimize(problem.task, optimizer="mipro", budget=400, space=problem.space, backend=backend,
                              options={"instructions": 3}, record=False, check_generation=0)
    proposals = run.search_ledger.calls_by_kind["propose"]
    assert proposals >= 3  # the task summary, then at least two instructions
    # the summary alone, then the first two proposals together (any further one, asked after a duplicate, alone)
    assert backend.generate_batches == proposals - 1


def test_an_outage_met_ahead_stops_the_first_request_it_left_unanswered_without_a_second_wait() -> None:
    calls: list[list[str]] = []

    def compute(requests: list[str]) -> list[dict]:
        calls.append(requests)
        raise BackendUnavailable("servers down", {0: ScoreResult((-0.5, -1.0), 3, 2)})

    meter = Meter(ResultCache(), BudgetLedger(cap_calls=10))
    meter.prefetch([(["a"], ["ask a"]), (["b"], ["ask b"])], compute)
    assert len(calls) == 1 and "a" in meter.ahead and meter.outage is not None
    [value], cached = meter.run(["a"], "score", ["ask a"], lambda r: [0] * len(r), compute)
    assert value["logprobs"] == [-0.5, -1.0] and cached == [False] and len(calls) == 1  # answered ahead
    with pytest.raises(BackendUnavailable):
        meter.run(["b"], "score", ["ask b"], lambda r: [0] * len(r), compute)
    assert len(calls) == 1 and meter.ledger.calls == 1  # no second wait; only what was answered is paid for


def test_reflect_with_several_parents_writes_their_critiques_and_edits_in_one_generate_call_each() -> None:
    """`parents=3`: a reflection step's critiques go to the model together, then its edits; each is still
    charged to the budget as its own call. With one parent every critique and edit is a call of its own."""
    problem = OracleProblem.colours()
    for parents in (1, 3):
        backend = CallCounter(problem.backend)
        sizes: list[int] = []
        generate = backend.generate
        backend.generate = lambda requests: (sizes.append(len(requests)), generate(requests))[1]
        run = prompttune.optimize(problem.task, optimizer="reflect", serve="logprobs", budget=800, space=problem.space,
                                  backend=backend, options={"parents": parents}, record=False, check_generation=0)
        written = run.search_ledger.calls_by_kind["propose"]
        race = run.strategy.optimizer
        assert written == 2 * len(race.moves.critiques) and run.search_ledger.calls <= 800
        if parents == 1:
            assert sizes == [1] * written
        else:
            assert max(sizes) == 3 and backend.generate_batches < written
            assert race.moves.made["reflect"] > 0


class DecodesAlone(CallCounter):
    """Decodes a call's texts one after another, as the transformers backend does."""

    @property
    def decodes_together(self) -> bool:
        return False


def _reflect_parents(problem: OracleProblem, backend, **options) -> tuple[int, list, str]:
    """reflect at budget 800 on `backend`: the parents it drew per step, its trials and its report's first line."""
    run = prompttune.optimize(problem.task, optimizer="reflect", serve="logprobs", budget=800, space=problem.space,
                              backend=backend, options=options, record=False, check_generation=0)
    race = run.strategy.optimizer
    return race.parents, run.trials.load(), race.report_lines()[0]


def test_reflect_draws_four_parents_by_default_only_where_a_calls_texts_are_decoded_together() -> None:
    """Unset, `parents` is 4 where the backend decodes a call's texts together (the oracle says it does, as vLLM
    and servers do) or with `decode_together`, and 1 where it decodes them one by one: there the default searches
    exactly as `parents=1` does, trial for trial, and the report says how many parents a step drew."""
    problem = OracleProblem.colours()

    search = partial(_reflect_parents, problem)
    alone, alone_trials, alone_said = search(DecodesAlone(problem.backend))
    assert alone == 1 and "1 parent per reflection step" in alone_said
    assert search(DecodesAlone(problem.backend), parents=1)[1] == alone_trials
    together, together_trials, together_said = search(CallCounter(problem.backend))
    assert together == 4 and "4 parents per reflection step" in together_said
    assert search(CallCounter(problem.backend), parents=4)[1] == together_trials != alone_trials
    assert search(DecodesAlone(problem.backend), decode_together=True)[0] == 4


class Measured(DecodesAlone):
    """A model in process whose batch cost was measured: `ratio` = four texts in one call over one text's time."""

    def __init__(self, inner, ratio: float) -> None:
        super().__init__(inner)
        self.ratio = ratio

    @property
    def batch_decode_ratio(self) -> float:
        return self.ratio


def test_reflects_default_follows_the_measured_batch_cost_of_a_model_in_process() -> None:
    """Where a model in process decodes four texts in one batch for under two texts' time (a GPU), the default
    draws four parents and decodes their texts together, as `decode_together=true` does; where each text costs its
    own time (a CPU), it searches as one parent a step; the report states the measured cost either way."""
    problem = OracleProblem.colours()

    search = partial(_reflect_parents, problem)
    gpu, gpu_trials, gpu_said = search(Measured(problem.backend, 1.1))
    assert gpu == 4 and "4 parents per reflection step (the writer decodes 4 texts in 1.10× one text's time)" in gpu_said
    assert gpu_trials == search(DecodesAlone(problem.backend), decode_together=True)[1]
    cpu, cpu_trials, cpu_said = search(Measured(problem.backend, 3.6))
    assert cpu == 1 and "1 parent per reflection step (the writer decodes 4 texts in 3.60× one text's time)" in cpu_said
    assert cpu_trials == search(DecodesAlone(problem.backend), parents=1)[1]


def test_the_batch_cost_is_timed_as_four_texts_in_one_call_over_one_text() -> None:
    """A decoder whose time grows with each text gives about 4; one whose batch costs one text's time about 1."""
    def timed(per_text: float, per_call: float):
        def generate(requests):
            time.sleep(per_call + per_text * len(requests))
            return [GenerateResult("1, 2", (), 1, 1) for _ in requests]
        return generate

    assert 3.0 < batch_decode_ratio(timed(0.02, 0.0)) < 4.5
    assert batch_decode_ratio(timed(0.0, 0.02)) < 1.5
    assert decoding_line(None) is None and "one parent per step" in decoding_line(3.6)
    assert "several parents per step and decodes their texts together" in decoding_line(1.1)


def test_a_set_decoded_together_is_asked_whole_when_any_member_is_missing() -> None:
    """A cached member of a together-set is decoded again beside the others (its cached text stays what `run`
    gets), so the missing members see the batch they saw in the run that cached the first."""
    for together, asked in ((False, ["ask a", "ask c"]), (True, ["ask a", "ask b", "ask c"])):
        calls: list[list[str]] = []
        cache = ResultCache()
        cache.put_many([("b", {"text": "cached b", "prompt_tokens": 1, "completion_tokens": 1})])
        meter = Meter(cache, BudgetLedger(cap_calls=10))
        meter.prefetch([([key], [f"ask {key}"]) for key in "abc"],
                       lambda requests: (calls.append(requests), [{"text": r} for r in requests])[1], together)
        assert calls == [asked] and sorted(meter.ahead) == ["a", "c"]


class BatchMarking(CallCounter):
    """Each generated text says how many requests of its group shared its call: a decoder whose texts
    depend on the batch, as a batched transformers decode may."""

    def generate(self, requests):
        results = super().generate(requests)
        return [replace(result, text=f"{result.text} ({sum(r.group == request.group for r in requests)} "
                                     "in its batch)") for request, result in zip(requests, results)]


def test_a_text_of_an_earlier_together_set_never_asked_is_decoded_alone_when_asked_later() -> None:
    """Only the set prefetched last keeps its texts keyed together: asked after another prefetch, a text of an
    earlier set is decoded alone, not taken from that set's batch."""
    backend = BatchMarking(OracleProblem.colours().backend)
    proposer = Proposer(backend, Meter(ResultCache(), BudgetLedger(cap_calls=10)))
    proposer.prefetch(["critique a", "critique b"], together=True)
    assert proposer("critique a").endswith("(2 in its batch)")
    proposer.prefetch(["edit c", "edit d"])
    assert proposer("critique b").endswith("(1 in its batch)") and backend.generate_batches == 3


def _reflect_together(tmp_path: Path, cache: Path, together: bool) -> tuple[list[dict], list[str]]:
    problem = OracleProblem.colours()
    run = prompttune.optimize(problem.task, optimizer="reflect", serve="logprobs", budget=800, space=problem.space,
                              backend=BatchMarking(problem.backend), cache=str(cache), runs_dir=str(tmp_path),
                              options={"parents": 3, "decode_together": together}, check_generation=0)
    ledger = {k: v for k, v in run.search_ledger.summary().items() if k != "calls_by_kind"}  # hits named apart
    return [*run.trials.load(), ledger, run.verdict.summary()], run.strategy.optimizer.moves.critiques


def test_reflect_decoding_together_batches_a_step_and_a_run_from_a_partial_cache_writes_the_same(
        tmp_path: Path) -> None:
    """`decode_together`: a step's critiques share one batch; a run whose cache lost some of them (a resumed
    one) decodes the same sets again and gets the uninterrupted run's texts, trials and charges; and a run that
    decodes alone never takes a text decoded together from a shared cache (they are keyed apart)."""
    alone_log, alone_critiques = _reflect_together(tmp_path / "alone", tmp_path / "alone.sqlite", together=False)
    full, critiques = _reflect_together(tmp_path / "full", tmp_path / "full.sqlite", together=True)
    assert any("(3 in its batch)" in c for c in critiques)
    assert not any("(3 in its batch)" in c for c in alone_critiques) and alone_log != full
    partial = tmp_path / "partial.sqlite"
    shutil.copy(tmp_path / "full.sqlite", partial)
    with sqlite3.connect(partial) as db:
        texts = [key for key, value in db.execute("SELECT key, value FROM results") if '"text"' in value]
        db.executemany("DELETE FROM results WHERE key = ?", [(key,) for key in texts[::2]])
    assert len(texts) > 4
    again, _ = _reflect_together(tmp_path / "again", partial, together=True)
    assert again == full
    shared, shared_critiques = _reflect_together(tmp_path / "shared", tmp_path / "full.sqlite", together=False)
    assert shared == alone_log and shared_critiques == alone_critiques
