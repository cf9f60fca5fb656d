"""A DSPy 3.4 LM engine that runs on prompttune's evaluator, so DSPy spends the arm's budget.

`dspy.LM(model, engine=MeteredEngine(...), cache=False)` sends every request here as one
`dspy.lm15.Request`. Two kinds arrive:

- classification queries, which `PromptSpecAdapter` registered with `expect` (spec + example
  id): they are scored by the arm's `Evaluator` — same rendering, scoring method, cache view
  and ledger as every prompttune arm — and answered with the predicted label word;
- anything else (instruction proposals, dataset summaries, reflections): generated from the chat
  messages by prompttune's own proposer, charged as one call each and cached (asking again for
  one text, temperature and seed is a hit) — greedily, or sampled at the request's temperature
  when DSPy asks for one (MIPROv2's proposals at 1.0, COPRO's at 1.4, GEPA's reflections). The
  k-th sample of an arm is drawn with a seed made of the arm seed and k, so the n samples DSPy
  asks for in one call differ, and a rerun draws the same texts.

When a request would pass the cap the engine raises `BudgetStop`, a BaseException: DSPy's
optimizers catch `Exception` around single examples and proposals and would otherwise carry on
with failed examples, so the stop propagates out of `compile` instead.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from dspy.lm15 import Message, Request, Response, TextPart, Usage, response_to_events

from prompttune.core.errors import BudgetExhausted
from prompttune.core.types import Prompt, Record
from prompttune.evaluation.evaluator import Evaluator
from prompttune.optimizers.proposer import Proposer
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


class MeteredEngine:
    def __init__(self, evaluator: Evaluator, observe: Observer | None = None,
                 max_new_tokens: int = 1024, seed: int = 0) -> None:
        self.evaluator = evaluator
        self.proposer = Proposer(evaluator.backend, evaluator.meter)
        self.observe = observe
        self.max_new_tokens = max_new_tokens  # a ceiling on what any request may ask for
        self.seed = seed
        self.threads = 1  # DSPy's num_threads for the arm
        self.halted = False
        self.samples = 0  # sampled generations asked for so far (each one charged unless cached)
        self._expected: dict[str, tuple[PromptSpec, str]] = {}

    def expect(self, spec: PromptSpec, example_id: str) -> str:
        """Register a classification query of a program's spec; returns the request content that
        stands for it (the exact model input, so DSPy's history shows what the model saw)."""
        ev = self.evaluator
        query = _without(spec, example_id)
        text = ev.backend.to_text(render(query, ev.examples[example_id], select_demos(query, ev.demo_pool)))
        self._expected[text] = (spec, example_id)
        return text

    def forget(self, text: str) -> None:
        self._expected.pop(text, None)

    def complete(self, request: Request) -> Response:
        if self.halted:
            raise BudgetStop("the arm's cap was reached")
        ledger = self.evaluator.ledger
        before = (ledger.prompt_tokens, ledger.completion_tokens)
        try:
            query = self._expected.get(_text(request.messages[-1])) if len(request.messages) == 1 else None
            answer = self._classify(*query) if query else self._generate(request)
        except BudgetExhausted as exc:
            raise BudgetStop(str(exc)) from exc
        usage = Usage(input_tokens=ledger.prompt_tokens - before[0],
                      output_tokens=ledger.completion_tokens - before[1])
        return Response(id=None, model=request.model, message=Message.assistant([TextPart(answer)]),
                        finish_reason="stop", usage=usage)

    def record(self, spec: PromptSpec, example_id: str) -> Record:
        """What a program's spec did on one example: read from the cache once asked (free)."""
        return self.evaluator.evaluate(_without(spec, example_id), [example_id])[0]

    def _classify(self, spec: PromptSpec, example_id: str) -> str:
        record = self.record(spec, example_id)
        if self.observe:
            self.observe(spec, record)
        return spec.label_words[record.pred] if record.pred is not None else (record.text or "")

    def _generate(self, request: Request) -> str:
        system = request.system if isinstance(request.system, str) else "".join(
            getattr(p, "text", "") for p in request.system or ())
        turns = [("system", system)] if system else []
        turns += [("assistant" if m.role == "assistant" else "user", _text(m)) for m in request.messages]
        text = self.evaluator.backend.to_text(Prompt(messages=tuple(turns)))
        limit = min(request.config.max_tokens or self.max_new_tokens, self.max_new_tokens)
        temperature = request.config.temperature or 0.0
        return self.proposer.complete(text, limit, temperature, self._draw_seed() if temperature else 0)

    def _draw_seed(self) -> int:
        self.samples += 1
        return int(np.random.SeedSequence((self.seed, self.samples)).generate_state(1)[0])

    def stream(self, request: Request):
        return response_to_events(self.complete(request))

    def close(self) -> None:
        """The backend belongs to the comparison, not to this engine."""

    def halt(self) -> None:
        """The cap stopped the arm: every later request is refused with `BudgetStop`."""
        self.halted = True
