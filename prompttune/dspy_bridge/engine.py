"""A DSPy 3.4 LM engine that runs on prompttune's evaluator, so DSPy spends the arm's budget.

`dspy.LM(model, engine=MeteredEngine(...), cache=False)` sends every request here as one
`dspy.lm15.Request`. Two kinds arrive:

- classification queries, which `PromptSpecAdapter` registered with `expect` (spec + example
  id): they are scored by the arm's `Evaluator` — same rendering, scoring method, cache view
  and ledger as every prompttune arm — and answered with the predicted label word;
- anything else (instruction proposals, dataset summaries, reflections): generated from the chat
  messages by prompttune's own proposer (the run's `--proposer-model` when given, as for prompttune's
  arms; else the task model), charged as one call each and cached (asking again for
  one text, temperature and seed is a hit) — greedily, or sampled at the request's temperature
  when DSPy asks for one (MIPROv2's proposals at 1.0, COPRO's at 1.4, GEPA's reflections). The
  k-th sample of an arm is drawn with a seed made of the arm seed and k, so the n samples DSPy
  asks for in one call differ, and a rerun draws the same texts.

DSPy calls the model one example at a time, from `num_threads` threads (dspy.Evaluate, GEPA,
SIMBA and BootstrapFewShotWithRandomSearch run their evaluations in a thread pool). With
`threads` > 1 the engine gathers the requests of those threads into batches: a request joins a
queue and its thread waits; when `threads` requests wait (every thread of the pool), or no new
one has come for `linger` seconds, one waiting thread takes up to `threads` of them and serves
them — first the distinct classification queries among them in one backend call, then each
request in the order it came exactly as it would be served alone (the queries are then cache
hits this arm has paid for). Of a batch the rest of the cap cannot pay for whole, the asks that
served one by one would surely be paid are still scored together; the others are served one by
one, so each is charged or refused as it would be alone. Answers, charges and cache entries are
those of the same requests served one at a time, and the ledger, the cache, the backend and the
observer are only ever used by one thread at a time.

Which of its threads asks first is up to timing, so a cap reached in mid-evaluation would pay for
whichever queries came first, and a rerun or a resume could pay for others. With threads, the arm
therefore hands the engine each `dspy.Evaluate` before its threads start (`EvaluationPrefetch`):
`prefetch_in_order` pays for its queries in the devset's order, as far as one thread asking in order
would be paid, and the threads then read paid cache hits.

When a request would pass the cap the engine raises `BudgetStop`, a BaseException: DSPy's
optimizers catch `Exception` around single examples and proposals and would otherwise carry on
with failed examples, so the stop propagates out of `compile` instead. DSPy's thread pool lets
its other workers run on when one raises; `halt` (called by the arm on `BudgetStop`) waits for a
batch in flight and refuses every later request, so none of them reaches the model afterwards.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from dspy.lm15 import Message, Request, Response, TextPart, Usage, response_to_events

from prompttune.core.errors import BudgetExhausted
from prompttune.core.types import Prompt, Record
from prompttune.optimizers.proposer import Proposer
from prompttune.scoring.evaluator import Evaluator
from prompttune.scoring.records import Query
from prompttune.search_spaces.prompt import PromptSpec, render, select_demos

Observer = Callable[[PromptSpec, Record], None]


class BudgetStop(BaseException):
    """The arm's cap is reached; caught by the arm, which keeps the best program seen so far."""


def _without(spec: PromptSpec, example_id: str) -> PromptSpec:
    """The spec a query on `example_id` runs: a program's spec less that example among its demos
    (DSPy hands a train example its own trace as a demo when it scores on the train split)."""
    return spec.with_updates(demo_ids=tuple(i for i in spec.demo_ids if i != example_id))


def _text(message: Message) -> str:
    return "".join(getattr(part, "text", "") for part in message.parts)


@dataclass
class _Ask:
    """One request waiting in the queue: a classification query (`query`) or a generation."""

    request: Request
    query: tuple[PromptSpec, str] | None
    text: str
    done: bool = False
    response: Response | None = None
    error: BaseException | None = None
    arrived: float = field(default_factory=time.monotonic)


class MeteredEngine:
    def __init__(self, evaluator: Evaluator, observe: Observer | None = None,
                 max_new_tokens: int = 1024, seed: int = 0, threads: int = 1, linger: float = 0.01,
                 proposer: Proposer | None = None) -> None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.evaluator = evaluator
        self.proposer = proposer or Proposer(evaluator.backend, evaluator.meter)  # the run's, charged to its meter
        self.observe = observe
        self.max_new_tokens = max_new_tokens  # a ceiling on what any request may ask for
        self.seed = seed
        self.threads = threads  # DSPy's num_threads for the arm, and the most requests one batch holds
        self.linger = linger  # seconds a partial batch waits for another request
        self.samples = 0  # sampled generations asked for so far (each one charged unless cached)
        self.halted = False
        self.batches: list[int] = []  # the size of every batch served (requests, before deduplication)
        self._expected: dict[str, tuple[PromptSpec, str, int]] = {}  # text -> spec, example id, registrations
        self._names = threading.Lock()  # guards _expected
        self._serving = threading.RLock()  # one thread at a time uses the evaluator, ledger, cache and observer
        self._queue: list[_Ask] = []
        self._changed = threading.Condition()  # guards the queue, `_flushing` and every ask's outcome
        self._flushing = False
        self._last_arrival = 0.0

    def expect(self, spec: PromptSpec, example_id: str) -> str:
        """Register a classification query of a program's spec; returns the request content that
        stands for it (the exact model input, so DSPy's history shows what the model saw)."""
        ev = self.evaluator
        query = _without(spec, example_id)
        text = ev.backend.to_text(render(query, ev.examples[example_id], select_demos(query, ev.demo_pool)))
        with self._names:  # two threads may ask the same query at once: count them
            _, _, count = self._expected.get(text, (spec, example_id, 0))
            self._expected[text] = (spec, example_id, count + 1)
        return text

    def forget(self, text: str) -> None:
        with self._names:
            entry = self._expected.get(text)
            if entry is None:
                return
            if entry[2] > 1:
                self._expected[text] = (*entry[:2], entry[2] - 1)
            else:
                del self._expected[text]

    def complete(self, request: Request) -> Response:
        if self.halted:
            raise BudgetStop("the arm's cap was reached")
        text = _text(request.messages[-1]) if request.messages else ""
        with self._names:
            entry = self._expected.get(text) if len(request.messages) == 1 else None
        ask = _Ask(request, entry[:2] if entry else None, text)
        with self._changed:
            self._queue.append(ask)
            self._last_arrival = ask.arrived
            self._changed.notify_all()
            while not ask.done:
                if self._flushing or not self._queue:
                    self._changed.wait()
                    continue
                idle = time.monotonic() - self._last_arrival
                if len(self._queue) < self.threads and idle < self.linger:
                    self._changed.wait(self.linger - idle)
                    continue
                batch, self._queue = self._queue[:self.threads], self._queue[self.threads:]
                self._flushing = True
                self._changed.release()
                try:
                    self._serve(batch)
                finally:
                    self._changed.acquire()
                    self._flushing = False
                    self._last_arrival = time.monotonic()  # the threads just served may ask again: wait for them
                    for waiting in batch:
                        waiting.done = True
                    self._changed.notify_all()
        if ask.error is not None:
            raise ask.error
        assert ask.response is not None
        return ask.response

    def _serve(self, batch: list[_Ask]) -> None:
        """Answer every ask of `batch` (a response or an error each), as if one at a time."""
        with self._serving:
            self.batches.append(len(batch))
            try:
                if self.halted:
                    raise BudgetStop("the arm's cap was reached")
                self._prefetch(batch)
                for ask in batch:
                    try:
                        ask.response = self._answer(ask)
                    except BudgetExhausted as exc:
                        ask.error = BudgetStop(str(exc))
                    except BaseException as exc:  # the asking thread raises it, as it would alone
                        ask.error = exc
            except BaseException as exc:
                for ask in batch:
                    if ask.response is None and ask.error is None:
                        ask.error = exc

    def _prefetch(self, batch: list[_Ask]) -> None:
        """Score the distinct classification queries of a batch in one backend call, through the
        evaluator's own cache view and ledger: the asks then read them as paid cache hits. A batch
        the cap cannot pay for whole is prefetched as far as the asks served alone, one after
        another, would surely be paid (`_paid_alone`); the rest, and a batch that meets an outage,
        is left to the asks, one at a time."""
        queries = [ask.query for ask in batch if ask.query is not None]
        if len(queries) < 2 or self._fetch(queries):
            return
        paid = [ask.query for ask in batch[:self._paid_alone(queries)] if ask.query is not None]
        if len(paid) > 1:
            self._fetch(paid)

    def prefetch_in_order(self, queries: list[tuple[PromptSpec, str]]) -> None:
        """Pay for a parallel evaluation's classification queries before its threads ask them, in the
        evaluation's own order and as far as the cap pays when they are asked one after another. At
        the cap, the queries paid for are then one thread's, whatever order the threads ask in: a
        compile that stops there spends, caches and replays the same calls in every run. Calibration's
        probes (more than one call a query) are prefetched only when the cap pays for all of them."""
        with self._serving:
            done = 0
            while done < len(queries) and not self.halted:
                rest = queries[done:]
                surely = self._paid_alone(rest)
                if surely == 0 or surely >= len(rest):  # no cap, all surely paid, or not known: all or none
                    self._fetch(rest)
                    return
                if not self._fetch(rest[:surely]):
                    return
                done += surely  # cache hits among them cost nothing: the cap may pay for more

    def _paid_alone(self, queries: list[tuple[PromptSpec, str]]) -> int:
        """How many leading asks the cap surely pays for when they are served alone, one after another,
        if `queries` are the classification queries among them: as many as the calls left, where no ask
        costs more than one call (a generation, or a query its evaluator answers with one score, one constrained
        answer or one generation); none otherwise (calibration's content-free probes and ensembles cost more)."""
        remaining = self.evaluator.ledger.remaining_calls()
        if remaining is None or remaining <= 0:
            return 0
        scoring = self.evaluator.scoring
        single = scoring in ("generate", "choice") or (scoring == "logit" and all(
            spec.cot or not spec.calibrate for spec, _ in queries))
        return remaining if single else 0

    def _fetch(self, queries: list[tuple[PromptSpec, str]]) -> bool:
        """Score `queries` in one backend call; False when the cap refused them (nothing was charged)."""
        distinct: dict[PromptSpec, list[str]] = {}
        for spec, example_id in queries:
            ids = distinct.setdefault(_without(spec, example_id), [])
            if example_id not in ids:
                ids.append(example_id)
        by_mode: dict[str, list[Query]] = {}
        for spec, ids in distinct.items():
            by_mode.setdefault(self.evaluator.answer_mode(spec), []).append(Query(spec, ids))
        try:
            for mode, mode_queries in by_mode.items():
                self.evaluator.outputs_many(mode_queries, mode)  # type: ignore[arg-type]
            self.evaluator.predictor.prefetch(list(distinct))  # calibration's content-free probes
        except BudgetExhausted:  # the asks alone meet the cap as they would have
            return False
        except Exception:  # an outage: each ask alone meets it as it would have
            pass
        return True

    def _answer(self, ask: _Ask) -> Response:
        """One request served as if alone (its classification query may already be a cache hit)."""
        ledger = self.evaluator.ledger
        before = (ledger.prompt_tokens, ledger.completion_tokens)
        if ask.query is not None:
            record = self.record(*ask.query)
            if self.observe:
                self.observe(ask.query[0], record)
            answer = ask.query[0].label_words[record.pred] if record.pred is not None else (record.text or "")
            # What the answer cost, whether this ask or a batch before it paid for it.
            usage = Usage(input_tokens=record.prompt_tokens, output_tokens=record.completion_tokens)
        else:
            answer = self._generate(ask.request)
            usage = Usage(input_tokens=ledger.prompt_tokens - before[0],
                          output_tokens=ledger.completion_tokens - before[1])
        return Response(id=None, model=ask.request.model, message=Message.assistant([TextPart(answer)]),
                        finish_reason="stop", usage=usage)

    def record(self, spec: PromptSpec, example_id: str) -> Record:
        """What a program's spec did on one example: read from the cache once asked (free)."""
        with self._serving:
            return self.evaluator.evaluate(_without(spec, example_id), [example_id])[0]

    def _generate(self, request: Request) -> str:
        system = request.system if isinstance(request.system, str) else "".join(
            getattr(p, "text", "") for p in request.system or ())
        turns = [("system", system)] if system else []
        turns += [("assistant" if m.role == "assistant" else "user", _text(m)) for m in request.messages]
        text = self.proposer.backend.to_text(Prompt(messages=tuple(turns)))  # in the proposer model's template
        limit = min(request.config.max_tokens or self.max_new_tokens, self.max_new_tokens)
        temperature = request.config.temperature or 0.0
        return self.proposer.complete(text, limit, temperature, self._draw_seed() if temperature else 0)

    def _draw_seed(self) -> int:
        self.samples += 1
        return int(np.random.SeedSequence((self.seed, self.samples)).generate_state(1)[0])

    def stream(self, request: Request):
        return response_to_events(self.complete(request))

    def halt(self) -> None:
        """The cap stopped the arm: wait for a batch in flight, then refuse every request, waiting
        or later, with `BudgetStop` (DSPy's pool may still run workers after compile has ended)."""
        self.halted = True
        with self._serving:
            pass
        with self._changed:
            for ask in self._queue:
                ask.error, ask.done = BudgetStop("the arm's cap was reached"), True
            self._queue.clear()
            self._changed.notify_all()

    def close(self) -> None:
        """The backend belongs to the comparison, not to this engine."""
