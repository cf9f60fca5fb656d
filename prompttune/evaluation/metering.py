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
from typing import Any, Callable, Mapping, Sequence, TypeVar

from prompttune.backends.base import Backend
from prompttune.core.errors import BackendUnavailable
from prompttune.core.types import GenerateRequest, GenerateResult, ScoreRequest, ScoreResult
from prompttune.evaluation.cache import ResultCache
from prompttune.evaluation.ledger import SHARED, BudgetLedger, Reservation
from prompttune.evaluation.metered_cache import MeteredCache

Request = TypeVar("Request")
# A cached value: what the model said, plus the tokens it cost (read when a hit is charged).
Value = dict[str, Any]


def result_value(result: ScoreResult | GenerateResult) -> Value:
    """The cached form of one backend result."""
    said = {"text": result.text} if isinstance(result, GenerateResult) else {"logprobs": list(result.logprobs)}
    return said | {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens}


def score_values(backend: Backend, requests: list[ScoreRequest]) -> list[Value]:
    return [result_value(o) for o in backend.score(requests)]


def generate_values(backend: Backend, requests: list[GenerateRequest]) -> list[Value]:
    return [result_value(o) for o in backend.generate(requests)]


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
        Without a token cap no tokens are reserved, and no bound is counted. When an outage cuts the
        misses short (`BackendUnavailable`), the answers received are settled and cached all the
        same, so a resumed run finds them and does not pay for them again.
        """
        found = self.cache.get_many(list(keys))
        missing = [i for i, key in enumerate(keys) if key not in found]
        owed = {key: found[key] for key in self.cache.unpaid([key for key in keys if key in found])}
        if not missing and not owed:
            return [found[key] for key in keys], [True] * len(keys)
        todo = [requests[i] for i in missing]
        bound = 0
        if self.ledger.cap_tokens is not None:  # only a token cap needs the bound, which tokenizes every prompt
            bound = sum(_tokens(list(owed.values()))) + (sum(bounds(todo)) if todo else 0)
        reservation = self.ledger.reserve({kind: len(missing), kind + SHARED: len(owed)}, bound)
        try:
            values = compute(todo) if todo else []
        except BackendUnavailable as exc:  # the answers received are kept, and paid for
            answered = {keys[missing[j]]: result_value(result) for j, result in exc.completed.items()}
            self._book(reservation, kind, owed, answered)
            raise
        except BaseException:
            self.ledger.release(reservation)
            raise
        new = {keys[i]: value for i, value in zip(missing, values)}
        self._book(reservation, kind, owed, new)
        found.update(self.cache.get_many(list(new)))  # as stored: another process may have stored a key first
        fresh = set(missing)
        return [found[key] for key in keys], [i not in fresh for i in range(len(keys))]

    def _book(self, reservation: Reservation, kind: str, owed: Mapping[str, Value], new: Mapping[str, Value]) -> None:
        """Settle `reservation` to the hits paid for (`owed`) and the misses answered (`new`), and cache these."""
        prompt, completion = _tokens([*owed.values(), *new.values()])
        self.ledger.settle(reservation, prompt, completion, {kind: len(new), kind + SHARED: len(owed)})
        self.cache.mark_paid(owed)
        self.cache.put_many(new.items())
