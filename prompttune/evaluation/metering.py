"""The one path of every model call — scoring, generation, proposer and embedding calls alike:
cache → ledger (calls counted, tokens reserved) → model → ledger (tokens settled) → cache.

Tokens are reserved before the model runs, at an upper bound of what each request can cost (the
backend's own token count of the prompt plus every label continuation, or plus `max_new_tokens`),
so `--budget-tokens` is never passed; after the call the reserve is settled to the counts the model
reported. A request that does not fit is refused whole, before the model sees any of it, exactly
as the call cap refuses one: a request is the unit an optimizer reasons about (a candidate on a
block of examples, one look of a challenge), part of one is records it did not ask for, and a
whole refusal ends a search at the same point in a rerun or a resume.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

from prompttune.backends.base import Backend
from prompttune.core.types import GenerateRequest, ScoreRequest
from prompttune.evaluation.cache import ResultCache
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.evaluation.metered_cache import MeteredCache

Request = TypeVar("Request")
# A cached value: what the model said, plus the tokens it cost (read when a hit is charged).
Value = dict[str, Any]


def score_values(backend: Backend, requests: list[ScoreRequest]) -> list[Value]:
    return [{"logprobs": list(o.logprobs), "prompt_tokens": o.prompt_tokens,
             "completion_tokens": o.completion_tokens} for o in backend.score(requests)]


def generate_values(backend: Backend, requests: list[GenerateRequest]) -> list[Value]:
    return [{"text": o.text, "prompt_tokens": o.prompt_tokens, "completion_tokens": o.completion_tokens}
            for o in backend.generate(requests)]


def _tokens(values: Sequence[Value]) -> tuple[int, int]:
    return sum(v["prompt_tokens"] for v in values), sum(v["completion_tokens"] for v in values)


@dataclass
class Meter:
    """One run's cache view and ledger; the evaluator, the proposer and the embedding model share it."""

    cache: ResultCache | MeteredCache
    ledger: BudgetLedger

    def run(self, keys: Sequence[str], kind: str, requests: Sequence[Request],
            bounds: Callable[[list[Request]], list[int]],
            compute: Callable[[list[Request]], list[Value]]) -> tuple[list[Value], list[bool]]:
        """The value of each key, and whether it came from the cache.

        A hit this run paid for is free. A hit it did not pay for (a shared `--cache`, another
        compare arm, the run it resumes) is charged at the entry's recorded tokens as the call it
        replaces, and every miss at its token bound (`bounds`), all in one reservation; only then
        are the misses computed (`compute`), and the reserve is settled to their real tokens.
        """
        found = self.cache.get_many(list(keys))
        missing = [i for i, key in enumerate(keys) if key not in found]
        owed = self.cache.unpaid([key for key in keys if key in found])
        if not missing and not owed:
            return [found[key] for key in keys], [True] * len(keys)
        todo = [requests[i] for i in missing]
        owed_prompt, owed_completion = _tokens([found[key] for key in owed])
        reservation = self.ledger.reserve({kind: len(missing), f"{kind} (shared cache)": len(owed)},
                                          owed_prompt + owed_completion + (sum(bounds(todo)) if todo else 0))
        try:
            values = compute(todo) if todo else []
        except BaseException:
            self.ledger.release(reservation)
            raise
        prompt, completion = _tokens(values)
        self.ledger.settle(reservation, owed_prompt + prompt, owed_completion + completion)
        self.cache.mark_paid(owed)
        new = {keys[i]: value for i, value in zip(missing, values)}
        self.cache.put_many(new.items())
        found.update(new)
        fresh = set(missing)
        return [found[key] for key in keys], [i not in fresh for i in range(len(keys))]
