"""The metered engine gathers DSPy's threads into batches: the same requests served through threads
or one at a time give the same answers, charges and cache entries, and the cap holds exactly."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

dspy = pytest.importorskip("dspy")

from prompttune.dspy_bridge.adapter import EvaluationPrefetch, PromptSpecAdapter  # noqa: E402
from prompttune.dspy_bridge.engine import BudgetStop, MeteredEngine  # noqa: E402
from prompttune.dspy_bridge.program import ProgramMapping  # noqa: E402
from prompttune.scoring.cache import ResultCache  # noqa: E402
from prompttune.scoring.evaluator import Evaluator  # noqa: E402
from prompttune.scoring.ledger import BudgetLedger  # noqa: E402
from prompttune.scoring.metered_cache import MeteredCache  # noqa: E402
from prompttune.search_spaces import default_space  # noqa: E402
from tests.support import CountingBackend, oracle_config, oracle_for, task_of  # noqa: E402


class BatchCountingBackend(CountingBackend):
    """Counts requests and backend invocations; refuses two threads inside it at once."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.invocations = 0
        self._inside = threading.Lock()

    def score(self, requests):
        if not self._inside.acquire(blocking=False):
            raise AssertionError("two threads reached the backend at once")
        try:
            self.invocations += 1
            return super().score(requests)
        finally:
            self._inside.release()

    def generate(self, requests):
        if not self._inside.acquire(blocking=False):
            raise AssertionError("two threads reached the backend at once")
        try:
            self.invocations += 1
            return super().generate(requests)
        finally:
            self._inside.release()


class Bridge:
    """One engine on the synthetic oracle, built as compare's DSPy arm builds it."""

    def __init__(self, tmp_path: Path, threads: int, cap: int | None = None, cap_tokens: int | None = None,
                 shared: ResultCache | None = None) -> None:
        config = oracle_config(tmp_path, train_size=60, dev_size=60)
        self.task = task = task_of(config)
        self.backend = BatchCountingBackend(oracle_for(config).inner)
        self.ledger = BudgetLedger(cap_calls=cap, cap_tokens=cap_tokens)
        self.cache = shared if shared is not None else ResultCache()
        self.view = MeteredCache(self.cache)
        evaluator = Evaluator(self.backend, {e.id: e for s in ("train", "dev") for e in task.splits[s]},
                              {e.id: e for e in task.splits["train"]}, self.view, self.ledger)
        base = default_space(task).default_candidate().spec
        self.mapping = ProgramMapping.build(base, task.input_fields, task.splits["train"], task.splits["dev"])
        self.observed: list[tuple] = []
        self._observing = threading.Lock()
        self.engine = MeteredEngine(evaluator, self.observe, seed=3, threads=threads, linger=0.005)
        self.lm = dspy.LM("prompttune/oracle", engine=self.engine, cache=False, num_retries=0, max_tokens=96)
        self.adapter = PromptSpecAdapter(self.mapping, self.engine)

    def observe(self, spec, record) -> None:
        with self._observing:
            self.observed.append((spec.instruction, spec.demo_ids, record.example_id, record.pred))

    def programs(self) -> list:
        train, base = self.task.splits["train"], self.mapping.base
        return [self.mapping.program(base, []),
                self.mapping.program(base.with_updates(instruction="Pick the colour of the item."), []),
                self.mapping.program(base.with_updates(instruction="Which colour? {labels}"), []),
                self.mapping.program(base.with_updates(demo_ids=tuple(e.id for e in train[:2])), train[:2])]

    def jobs(self) -> list[tuple[int, int | None, str]]:
        """(program, dev example) queries, each asked twice, and greedy generations among them."""
        queries = [(p, i, "") for p in range(4) for i in range(25)]
        asks: list[tuple[int, int | None, str]] = [job for pair in zip(queries, queries[::-1]) for job in pair]
        for k in range(6):
            asks.insert(30 * k + 7, (0, None, f"Name colour number {k}."))
        return asks

    def run(self, job: tuple[int, int | None, str], programs: list) -> str:
        program, index, question = job
        with dspy.context(lm=self.lm, adapter=self.adapter):
            if index is None:
                return dspy.Predict("question -> answer")(question=question).answer
            example = self.mapping.example(self.task.splits["dev"][index])
            return programs[program](**example.inputs()).label

    def serve(self, jobs, workers: int) -> list:
        programs = self.programs()

        def one(job):
            try:
                return self.run(job, programs)
            except BudgetStop:
                return BudgetStop

        if workers == 1:
            return [one(job) for job in jobs]
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(one, jobs))

    def cache_rows(self) -> dict[str, str]:
        with self.cache._lock:
            return dict(self.cache._db.execute("SELECT key, value FROM results").fetchall())


def _spend(bridge: Bridge) -> tuple:
    ledger = bridge.ledger
    return ledger.calls, dict(ledger.calls_by_kind), ledger.prompt_tokens, ledger.completion_tokens


def test_threads_batched_give_the_answers_charges_and_cache_of_one_at_a_time(tmp_path: Path) -> None:
    alone, batched = Bridge(tmp_path / "alone", threads=1), Bridge(tmp_path / "batched", threads=8)
    jobs = alone.jobs()
    answers = alone.serve(jobs, workers=1)
    assert batched.serve(jobs, workers=8) == answers
    assert _spend(batched) == _spend(alone) and alone.ledger.calls == 4 * 25 + 6  # each distinct ask once
    assert batched.cache_rows() == alone.cache_rows()
    assert batched.backend.calls == alone.backend.calls == alone.ledger.calls  # served = charged
    assert sorted(batched.observed) == sorted(alone.observed)
    # ...in far fewer backend calls: batches of up to 8 requests, scored together.
    assert max(batched.engine.batches) == 8 and batched.backend.invocations < alone.backend.invocations / 3


def test_a_shared_cache_hit_is_charged_once_in_a_batch_as_alone(tmp_path: Path) -> None:
    """Another arm's entries (a foreign hit) cost this arm a call each, batched or not."""
    rows = []
    for threads, workers in ((1, 1), (8, 8)):
        shared = ResultCache()
        other = Bridge(tmp_path / f"other{threads}", threads=1, shared=shared)
        other.serve(other.jobs()[:40], workers=1)
        bridge = Bridge(tmp_path / f"arm{threads}", threads=threads, shared=shared)
        bridge.serve(bridge.jobs(), workers=workers)
        rows.append((_spend(bridge), bridge.view.foreign_calls, bridge.backend.calls))
    assert rows[0] == rows[1] and rows[0][1] > 0


@pytest.mark.parametrize("cap", [37, 64, 105])
def test_the_cap_holds_exactly_under_concurrency(tmp_path: Path, cap: int) -> None:
    bridge = Bridge(tmp_path, threads=8, cap=cap)
    answers = bridge.serve(bridge.jobs(), workers=8)
    reference = Bridge(tmp_path / "alone", threads=1).serve(bridge.jobs(), workers=1)
    # Not one call past the cap, and the cap spent to the last call: a batch that does not fit
    # whole is served one request at a time, each charged or refused as alone.
    assert bridge.ledger.calls == bridge.backend.calls == cap
    assert BudgetStop in answers
    # What was answered is what one-at-a-time answers.
    assert all(a == r for a, r in zip(answers, reference) if a is not BudgetStop)


def test_the_token_cap_holds_under_concurrency(tmp_path: Path) -> None:
    alone = Bridge(tmp_path / "alone", threads=1)
    alone.serve(alone.jobs(), workers=1)
    cap_tokens = alone.ledger.tokens // 2
    bridge = Bridge(tmp_path, threads=8, cap_tokens=cap_tokens)
    answers = bridge.serve(bridge.jobs(), workers=8)
    assert BudgetStop in answers and bridge.ledger.tokens <= cap_tokens and bridge.ledger.reserved_tokens == 0


def test_halt_refuses_waiting_and_later_requests_without_the_model(tmp_path: Path) -> None:
    bridge = Bridge(tmp_path, threads=8, cap=200)
    bridge.serve(bridge.jobs()[:10], workers=8)
    served = bridge.backend.calls
    bridge.engine.halt()
    assert set(bridge.serve(bridge.jobs()[10:40], workers=8)) == {BudgetStop}
    assert bridge.backend.calls == served == bridge.ledger.calls


def test_one_query_asked_by_two_threads_at_once_stays_a_classification(tmp_path: Path) -> None:
    bridge = Bridge(tmp_path, threads=1)
    spec, example = bridge.mapping.base, bridge.task.splits["dev"][0]
    first = bridge.engine.expect(spec, example.id)
    assert bridge.engine.expect(spec, example.id) == first
    bridge.engine.forget(first)  # one thread is done with it; the other has yet to send it
    response = bridge.engine.complete(dspy.lm15.Request(model="m", messages=(dspy.lm15.Message.user(first),)))
    assert response.text in spec.label_words and dict(bridge.ledger.calls_by_kind) == {"score": 1}
    bridge.engine.forget(first)
    assert not bridge.engine._expected


def test_dspy_evaluate_with_threads_batches_and_matches_one_thread(tmp_path: Path) -> None:
    scores = []
    for threads in (1, 6):
        bridge = Bridge(tmp_path / str(threads), threads=threads)
        devset = [bridge.mapping.example(e) for e in bridge.task.splits["dev"][:48]]
        with dspy.context(lm=bridge.lm, adapter=bridge.adapter):
            result = dspy.Evaluate(devset=devset, metric=lambda g, p, t=None: g.label == p.label,
                                   num_threads=threads)(bridge.programs()[1])
        scores.append((result.score, [r[1].label for r in result.results], _spend(bridge)))
        if threads > 1:
            assert max(bridge.engine.batches) > 1
    assert scores[0] == scores[1]


def _evaluate_past_the_cap(bridge: Bridge, threads: int, prefetch: bool) -> None:
    """Two `dspy.Evaluate`s of one program: 9 dev examples, then 35 from dev[5] on (4 of them cached);
    the cap (22 calls) is reached in mid-evaluation, at dev[21]."""
    dev = bridge.task.splits["dev"]
    metric = lambda gold, pred, trace=None: gold.label == pred.label  # noqa: E731
    program = bridge.programs()[1]
    callbacks = [EvaluationPrefetch(bridge.mapping, bridge.engine)] if prefetch else []
    with dspy.context(lm=bridge.lm, adapter=bridge.adapter, callbacks=callbacks):
        dspy.Evaluate(devset=[bridge.mapping.example(e) for e in dev[:9]], metric=metric, num_threads=threads)(program)
        with pytest.raises(BudgetStop):
            dspy.Evaluate(devset=[bridge.mapping.example(e) for e in dev[5:40]], metric=metric,
                          num_threads=threads)(program)
    bridge.engine.halt()


@pytest.mark.parametrize("threads", [1, 8, 8, 8])
def test_an_evaluate_stopped_by_the_cap_pays_for_its_devset_in_order_whatever_the_threads(
        tmp_path: Path, threads: int) -> None:
    """The evaluation's queries are paid in the devset's order before its threads ask them: a cap reached
    in mid-evaluation pays for the first examples, as one thread asking in order does — not for the ones
    whose threads happened to ask first — so a compile stopped there replays the same calls."""
    in_order = Bridge(tmp_path / "in_order", threads=1, cap=22)
    _evaluate_past_the_cap(in_order, 1, prefetch=False)
    bridge = Bridge(tmp_path / "prefetched", threads=threads, cap=22)
    _evaluate_past_the_cap(bridge, threads, prefetch=True)
    assert set(bridge.cache_rows()) == set(in_order.cache_rows()) and len(in_order.cache_rows()) == 22
    assert _spend(bridge) == _spend(in_order) and bridge.backend.calls == 22
    # One backend call for the first evaluation; two for the second: the first 13 of it, which the 13 calls
    # left surely pay for, hold 4 cached examples, so the cap pays for 4 more after them.
    assert bridge.backend.invocations == 3


def _asks(bridge: Bridge, generation_at: int | None = None) -> list:
    """Eight asks as the engine queues them: queries of one program on distinct dev examples, and
    a generation in place of the query at `generation_at`."""
    from prompttune.dspy_bridge.engine import _Ask

    spec, asks = bridge.mapping.base, []
    for i, example in enumerate(bridge.task.splits["dev"][:8]):
        if i == generation_at:
            request = dspy.lm15.Request(model="m", messages=(dspy.lm15.Message.user("Name a colour."),))
            asks.append(_Ask(request, None, "Name a colour."))
            continue
        text = bridge.engine.expect(spec, example.id)
        asks.append(_Ask(dspy.lm15.Request(model="m", messages=(dspy.lm15.Message.user(text),)),
                         (spec, example.id), text))
    return asks


@pytest.mark.parametrize("generation_at", [None, 2])
def test_a_batch_the_cap_pays_in_part_is_scored_together_as_far_as_alone_pays(tmp_path: Path,
                                                                             generation_at: int | None) -> None:
    """At the cap, the asks that served alone one after another would be paid (one call each at
    most) are still scored in one backend call; the rest are refused as alone."""
    batched, alone = Bridge(tmp_path / "batched", threads=8, cap=5), Bridge(tmp_path / "alone", threads=1, cap=5)
    together, apart = _asks(batched, generation_at), _asks(alone, generation_at)
    batched.engine._serve(together)
    for ask in apart:
        alone.engine._serve([ask])

    def outcome(ask) -> object:
        return ask.response.text if ask.error is None else type(ask.error)

    assert [outcome(a) for a in together] == [outcome(a) for a in apart]
    assert [outcome(a) for a in together][5:] == [BudgetStop] * 3
    assert _spend(batched) == _spend(alone) and batched.ledger.calls == 5
    assert batched.cache_rows() == alone.cache_rows()
    # One backend call for the queries the cap pays for (and one for the generation among them).
    assert batched.backend.invocations == 1 + (generation_at is not None)
    assert alone.backend.invocations == 5
