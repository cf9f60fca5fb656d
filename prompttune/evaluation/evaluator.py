"""The one place where candidates meet the model: render → cache → ledger → backend → records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

from prompttune.backends.base import Backend, GenerateRequest, ScoreRequest
from prompttune.errors import UserError
from prompttune.evaluation.cache import ResultCache, cache_key
from prompttune.evaluation.extraction import extract_label
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.search_spaces.prompt import PromptSpec, render, select_demos
from prompttune.tasks.base import Example

Scoring = Literal["logit", "generate"]


@dataclass(frozen=True)
class Record:
    """Outcome of one prompt on one example; `pred` is None for an invalid response."""

    example_id: str
    gold: int
    pred: int | None
    label_logprobs: tuple[float, ...] | None
    text: str | None
    prompt_tokens: int
    completion_tokens: int
    cached: bool

    @property
    def correct(self) -> bool:
        return self.pred == self.gold

    @property
    def valid(self) -> bool:
        return self.pred is not None


class Evaluator:
    """Scores a PromptSpec on example ids it can see; ids outside its splits are refused.

    The search evaluator is built over train+dev only; confirmation builds a separate one
    (with its own ledger) over the test split, so no optimizer can reach test examples.
    """

    def __init__(self, backend: Backend, examples: Mapping[str, Example], demo_pool: Mapping[str, Example],
                 cache: ResultCache, ledger: BudgetLedger, scoring: Scoring = "logit",
                 max_new_tokens: int = 16, cot_max_new_tokens: int = 128) -> None:
        self.backend = backend
        self.examples = examples
        self.demo_pool = demo_pool
        self.cache = cache
        self.ledger = ledger
        self.scoring = scoring
        self.max_new_tokens = max_new_tokens
        self.cot_max_new_tokens = cot_max_new_tokens

    def _example(self, example_id: str) -> Example:
        try:
            return self.examples[example_id]
        except KeyError:
            raise PermissionError(f"example {example_id!r} is not visible to this evaluator "
                                  f"(held-out or unknown)") from None

    def evaluate(self, spec: PromptSpec, example_ids: Sequence[str]) -> list[Record]:
        examples = [self._example(i) for i in example_ids]
        demos = select_demos(spec, self.demo_pool)
        demo_ids = {d.id for d in demos}
        if demo_ids & set(example_ids):
            raise UserError("a demo example is also being scored; demos must come from the train split")
        prompts = [render(spec, ex, demos) for ex in examples]
        texts = [self.backend.to_text(p) for p in prompts]
        use_generation = self.scoring == "generate" or spec.cot
        max_new = self.cot_max_new_tokens if spec.cot else self.max_new_tokens
        if use_generation:
            keys = [cache_key(self.backend.model_id, "generate", max_new, t, ex.id)
                    for t, ex in zip(texts, examples)]
        else:
            keys = [cache_key(self.backend.model_id, "logit", t, p.label_continuations, ex.id)
                    for t, p, ex in zip(texts, prompts, examples)]
        found = self.cache.get_many(keys)
        missing = [i for i, k in enumerate(keys) if k not in found]
        if missing:
            self.ledger.reserve(len(missing), "generate" if use_generation else "score")
            if use_generation:
                outs = self.backend.generate([GenerateRequest(texts[i], max_new) for i in missing])
                values = [{"text": o.text, "prompt_tokens": o.prompt_tokens,
                           "completion_tokens": o.completion_tokens} for o in outs]
            else:
                outs = self.backend.score([ScoreRequest(texts[i], prompts[i].label_continuations)
                                           for i in missing])
                values = [{"logprobs": list(o.logprobs), "prompt_tokens": o.prompt_tokens,
                           "completion_tokens": o.completion_tokens} for o in outs]
            self.ledger.add_tokens(sum(v["prompt_tokens"] for v in values),
                                   sum(v["completion_tokens"] for v in values))
            new = {keys[i]: v for i, v in zip(missing, values)}
            self.cache.put_many(new.items())
            found.update(new)
        fresh = set(missing)
        return [self._record(ex, found[k], spec, use_generation, i not in fresh)
                for i, (ex, k) in enumerate(zip(examples, keys))]

    @staticmethod
    def _record(ex: Example, value: dict, spec: PromptSpec, generated: bool, cached: bool) -> Record:
        if generated:
            pred = extract_label(value["text"], spec.label_words, cot=spec.cot)
            logprobs, text = None, value["text"]
        else:
            logprobs, text = tuple(value["logprobs"]), None
            pred = max(range(len(logprobs)), key=logprobs.__getitem__)
        return Record(ex.id, ex.label, pred, logprobs, text, value["prompt_tokens"],
                      value["completion_tokens"], cached)

    def propose(self, text: str, max_new_tokens: int = 128) -> str:
        """A proposer/critic call (instruction writing): charged like any other model call."""
        self.ledger.reserve(1, "propose")
        out = self.backend.generate([GenerateRequest(text, max_new_tokens)])[0]
        self.ledger.add_tokens(out.prompt_tokens, out.completion_tokens)
        return out.text
