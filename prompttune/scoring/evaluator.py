"""Where prompts meet the model: render → `Meter` (cache → ledger → backend) → outputs.

`outputs` returns what the model said; `evaluate` turns that into per-example records through
the evaluator's prediction method (`prediction.py`), so every method shares cache and ledger.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from functools import partial
from typing import Iterable, Mapping, Sequence

from prompttune.backends.backend import Backend
from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.types import ChoiceRequest, Example, GenerateRequest, Record, ScoreRequest
from prompttune.scoring.cache import ResultCache, cache_key
from prompttune.scoring.contract import GENERATION, choice_bias
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.metered_cache import MeteredCache
from prompttune.scoring.metering import Meter, choose_values, generate_values, score_values
from prompttune.scoring.prediction import Scoring, make_predictor
from prompttune.scoring.records import CONTENT_FREE_PREFIX, Mode, Output, Query
from prompttune.search_spaces.prompt import PromptSpec, fixed_part, render, render_many, select_demos

__all__ = ["Evaluator", "build_evaluator", "Output", "Query", "Record", "Scoring", "prompt_tokens", "shared_prefix"]


def _content_free_example(spec: PromptSpec, example_id: str) -> Example:
    value = example_id[len(CONTENT_FREE_PREFIX):]
    names = {name for name, _ in spec.input_templates + spec.passage_templates}
    return Example(example_id, {name: value for name in names}, -1)


# What a generated answer may take, without and with CoT: the serving contract's, pinned in one place.
MAX_NEW_TOKENS, COT_MAX_NEW_TOKENS = GENERATION.max_tokens, GENERATION.cot_max_tokens

# Stands in for every input value when rendering a candidate's shared prefix; never in real text.
_PROBE = "\x00"


def shared_prefix(backend: Backend, spec: PromptSpec, demos: Sequence[Example]) -> str:
    """The final prompt text (chat template included) before the first input value: what every
    example of this candidate shares, handed to the backend so it computes it only once."""
    text = backend.to_text(render(spec, _content_free_example(spec, CONTENT_FREE_PREFIX + _PROBE), demos))
    return text[:max(text.find(_PROBE), 0)]


def prompt_tokens(backend: Backend, spec: PromptSpec, demos: Sequence[Example]) -> int:
    """Tokens of the prompt around empty inputs (chat template included), counted by the backend: what every
    request of this prompt pays besides its input (`--max-prompt-tokens`, the report's prompt tokens)."""
    return backend.count_tokens([backend.to_text(fixed_part(spec, demos))])[0]


def _output(example: Example, value: dict, cached: bool) -> Output:
    logprobs = value.get("logprobs")
    return Output(example, None if logprobs is None else tuple(logprobs), value.get("text"),
                  value["prompt_tokens"], value["completion_tokens"], cached, value.get("choice"))


_COMPUTE = {"score": score_values, "generate": generate_values, "choice": choose_values}


class Evaluator:
    """Scores a PromptSpec on example ids it can see; ids outside its splits are refused.

    The search evaluator is built over train+dev only; confirmation builds a separate one
    (with its own ledger) over the test split, so no optimizer can reach test examples.
    Content-free ids (`content-free:N/A`) carry no data, so every evaluator may score them.
    """

    def __init__(self, backend: Backend, examples: Mapping[str, Example], demo_pool: Mapping[str, Example],
                 cache: ResultCache | MeteredCache, ledger: BudgetLedger, scoring: Scoring | str = "logit",
                 max_new_tokens: int = MAX_NEW_TOKENS, cot_max_new_tokens: int = COT_MAX_NEW_TOKENS) -> None:
        self.backend = backend
        self.examples = examples
        self.demo_pool = demo_pool
        self.cache = cache
        self.ledger = ledger
        self.meter = Meter(cache, ledger)
        self.scoring = scoring
        self.predictor = make_predictor(scoring, self)
        self.max_new_tokens = max_new_tokens
        self.cot_max_new_tokens = cot_max_new_tokens
        self.prepared: dict[tuple[PromptSpec, tuple[str, ...], Mode], tuple[list[Example], list[str], list]] = {}

    def _example(self, spec: PromptSpec, example_id: str) -> Example:
        if example_id.startswith(CONTENT_FREE_PREFIX):
            return _content_free_example(spec, example_id)
        try:
            return self.examples[example_id]
        except KeyError:
            raise PermissionError(f"example {example_id!r} is not visible to this evaluator "
                                  f"(held-out or unknown)") from None

    def evaluate(self, spec: PromptSpec, example_ids: Sequence[str]) -> list[Record]:
        """Per-example records under this evaluator's prediction method (`scoring`)."""
        return self.predictor.predict(spec, example_ids)

    def outputs(self, spec: PromptSpec, example_ids: Sequence[str], mode: Mode,
                continuations: Sequence[tuple[str, ...]] | None = None,
                kind: str | None = None) -> list[Output]:
        """Model outputs, one per example, through the run's `Meter` (see `metering.py` for what is
        charged, and when).

        `score` teacher-forces the label continuations, or `continuations[i]` for example i
        when given; `generate` decodes greedily. `kind` names the calls in the ledger.
        """
        return self.outputs_many([Query(spec, example_ids, continuations)], mode, kind)[0]

    def outputs_many(self, queries: Sequence[Query], mode: Mode, kind: str | None = None) -> list[list[Output]]:
        """`outputs` for several prompts in one backend call, so batches stay full when every
        prompt has only a few examples (each call and each decoding step has a fixed cost)."""
        examples: list[Example] = []
        keys: list[str] = []
        requests: list = []
        for query in queries:
            query_examples, query_keys, query_requests = self._prepare(query, mode)
            examples += query_examples
            keys += query_keys
            requests += query_requests
        compute = partial(_COMPUTE[mode], self.backend)
        values, cached = self.meter.run(keys, kind or mode, requests, self.backend.token_bounds, compute)
        flat = [_output(ex, value, hit) for ex, value, hit in zip(examples, values, cached)]
        bounds = list(itertools.accumulate(len(q.example_ids) for q in queries))
        return [flat[stop - len(q.example_ids):stop] for q, stop in zip(queries, bounds)]

    def answer_mode(self, spec: PromptSpec) -> Mode:
        """The outputs this evaluator's prediction method reads for `spec` as they are: generated text (under
        `generate`, or a chain-of-thought prompt), a constrained answer (`choice`), else label scores."""
        return "generate" if self.scoring == "generate" or spec.cot else "choice" if self.scoring == "choice" \
            else "score"

    def prefetch(self, work: Sequence[tuple[PromptSpec, Sequence[str]]]) -> None:
        """Have the model answer several prompts' examples in one backend call before they are asked for
        (`Meter.prefetch`): nothing is charged or cached until `evaluate` asks, in its own order. Only
        answers the prediction method reads as they are (direct label scores, or generated text) are
        fetched; calibrated and ensemble scoring ask as before. A query that would fail is left to fail
        where it is asked."""
        if self.scoring not in ("logit", "generate", "choice"):
            return
        by_mode: dict[Mode, list[tuple[list[str], list]]] = {"score": [], "generate": [], "choice": []}
        for group, (spec, example_ids) in enumerate(work):
            if spec.calibrate:
                continue
            mode = self.answer_mode(spec)
            try:
                prepared = self._prepare(Query(spec, example_ids), mode)
            except (UserError, PermissionError):
                continue
            self.prepared[spec, tuple(example_ids), mode] = prepared  # rendered once: `evaluate` takes it
            _, keys, requests = prepared
            by_mode[mode].append((keys, [replace(request, group=group) for request in requests]))  # batched as if alone
        for mode, queries in by_mode.items():
            if queries:
                compute = partial(_COMPUTE[mode], self.backend)
                self.meter.prefetch(queries, compute)

    def _prepare(self, query: Query, mode: Mode) -> tuple[list[Example], list[str], list]:
        """Render one query: its examples, cache keys and backend requests (as `prefetch` rendered them)."""
        spec, ids = query.spec, query.example_ids
        if query.continuations is None and (prepared := self.prepared.pop((spec, tuple(ids), mode), None)):
            return prepared
        examples = [self._example(spec, i) for i in ids]
        demos = select_demos(spec, self.demo_pool)
        if {d.id for d in demos} & set(ids):
            raise UserError("a demo example is also being scored; demos must come from the train split")
        prompts = render_many(spec, examples, demos)
        texts = [self.backend.to_text(p) for p in prompts]
        prefix = shared_prefix(self.backend, spec, demos)
        if mode == "generate":
            max_new = self.cot_max_new_tokens if spec.cot else self.max_new_tokens
            keys = [cache_key(self.backend.model_id, "generate", max_new, t, ex.id)
                    for t, ex in zip(texts, examples)]
            return examples, keys, [GenerateRequest(t, max_new, prefix, GENERATION.temperature) for t in texts]
        conts = (list(query.continuations) if query.continuations is not None
                 else [p.label_continuations for p in prompts])
        if len(conts) != len(examples):
            raise ValueError(f"{len(conts)} continuation sets for {len(examples)} examples")
        if mode == "choice":
            bias = choice_bias(spec)
            keys = [cache_key(self.backend.model_id, "choice", t, c, bias, ex.id)
                    for t, c, ex in zip(texts, conts, examples)]
            return examples, keys, [ChoiceRequest(t, tuple(c), bias, prefix) for t, c in zip(texts, conts)]
        keys = [cache_key(self.backend.model_id, "logit", t, c, ex.id) for t, c, ex in zip(texts, conts, examples)]
        return examples, keys, [ScoreRequest(t, tuple(c), prefix) for t, c in zip(texts, conts)]


def build_evaluator(config: RunConfig, backend: Backend, examples: Iterable[Example], demo_pool: Iterable[Example],
                    cache: ResultCache | MeteredCache, ledger: BudgetLedger, scoring: Scoring | str | None = None,
                    max_new_tokens: int = MAX_NEW_TOKENS) -> Evaluator:
    """The evaluator every run, comparison, evaluation and prediction scores through: it sees `examples` only,
    draws demos from `demo_pool` (the train split) and scores as `config` does unless `scoring` says otherwise,
    so which examples an evaluator may see is wired in this one place."""
    return Evaluator(backend, {ex.id: ex for ex in examples}, {ex.id: ex for ex in demo_pool}, cache, ledger,
                     scoring=config.scoring if scoring is None else scoring, max_new_tokens=max_new_tokens)
