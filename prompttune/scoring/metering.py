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

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence, TypeVar

from prompttune.backends.backend import Backend
from prompttune.core.errors import BackendUnavailable
from prompttune.core.types import ChoiceRequest, ChoiceResult, GenerateRequest, GenerateResult, ScoreRequest, ScoreResult
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.ledger import SHARED, BudgetLedger, Reservation
from prompttune.scoring.metered_cache import MeteredCache

Request = TypeVar("Request")
# A search's batch of requests asked ahead is sized to take about CALL_SECONDS at the scoring rate measured so
# far, but never under MIN_CALL_ROWS rows (nor before any rate is measured), so a stop (Ctrl-C, a limit) is heard
# between backend calls and a killed run loses at most that much uncached work, while a pool of servers still gets
# enough requests at once to keep its slots busy and a GPU's calls stay thousands of rows long.
CALL_SECONDS = 10.0
MIN_CALL_ROWS = 256
# A cached value: what the model said, plus the tokens it cost (read when a hit is charged).
Value = dict[str, Any]


def result_value(result: ScoreResult | GenerateResult | ChoiceResult) -> Value:
    """The cached form of one backend result."""
    said: Value = {"text": result.text} if isinstance(result, GenerateResult) else {"logprobs": list(result.logprobs)}
    if isinstance(result, ChoiceResult):
        said["choice"] = result.choice
    return said | {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens}


def score_values(backend: Backend, requests: list[ScoreRequest]) -> list[Value]:
    return [result_value(o) for o in backend.score(requests)]


def generate_values(backend: Backend, requests: list[GenerateRequest]) -> list[Value]:
    return [result_value(o) for o in backend.generate(requests)]


def choose_values(backend: Backend, requests: list[ChoiceRequest]) -> list[Value]:
    return [result_value(o) for o in backend.choose(requests)]


def _tokens(values: Sequence[Value]) -> tuple[int, int]:
    return sum(v["prompt_tokens"] for v in values), sum(v["completion_tokens"] for v in values)


@dataclass
class BackendUse:
    """How work reached the model: backend calls, the rows (requests) they held, and the seconds spent
    in them, scoring and generating apart (each call has a fixed cost, so rows per call is what batching
    buys; the report shows these)."""

    calls: int = 0
    rows: int = 0
    scoring_seconds: float = 0.0
    generation_calls: int = 0
    generation_rows: int = 0
    generation_seconds: float = 0.0

    def add(self, requests: Sequence[Any], seconds: float) -> None:
        self.calls += 1
        self.rows += len(requests)
        if requests and isinstance(requests[0], GenerateRequest):
            self.generation_calls += 1
            self.generation_rows += len(requests)
            self.generation_seconds += seconds
        else:
            self.scoring_seconds += seconds

    def __add__(self, other: "BackendUse") -> "BackendUse":
        return BackendUse(*(a + b for a, b in zip(asdict(self).values(), asdict(other).values())))

    @property
    def rows_per_call(self) -> float:
        return self.rows / self.calls if self.calls else 0.0

    def summary(self, wall_seconds: float) -> dict[str, float]:
        """The counts, rows per call, and the seconds outside the backend of a phase that took `wall_seconds`."""
        return {**asdict(self), "rows_per_call": round(self.rows_per_call, 2),
                "engine_seconds": max(wall_seconds - self.scoring_seconds - self.generation_seconds, 0.0)}


@dataclass
class Meter:
    """One run's cache view and ledger; the evaluator, the proposer and the embedding model share it.

    `prefetch` lets the model answer several requests in one backend call before they are asked for;
    each answer is charged, cached and handed out only when `run` asks for it (`ahead` holds them till
    then), so charges, their order, the cache and every trial are what asking one by one gives.
    """

    cache: ResultCache | MeteredCache
    ledger: BudgetLedger
    ahead: dict[str, Value] = field(default_factory=dict)
    use: BackendUse = field(default_factory=BackendUse)
    outage: BackendUnavailable | None = None  # met by a prefetch: the next request it did not answer stops on it

    def call_rows(self) -> float:
        """Rows a scoring call may hold: about CALL_SECONDS at the rate this meter measured so far, at least
        MIN_CALL_ROWS."""
        scored = self.use.rows - self.use.generation_rows
        if not scored:
            return MIN_CALL_ROWS
        if self.use.scoring_seconds <= 0:
            return float("inf")
        return max(MIN_CALL_ROWS, CALL_SECONDS * scored / self.use.scoring_seconds)

    def _compute(self, compute: Callable[[list[Request]], list[Value]], requests: list[Request]) -> list[Value]:
        start = time.perf_counter()
        try:
            return compute(requests)
        finally:
            self.use.add(requests, time.perf_counter() - start)

    def prefetch(self, queries: Sequence[tuple[Sequence[str], Sequence[Request]]],
                 compute: Callable[[list[Request]], list[Value]], together: bool = False) -> None:
        """Answer in one backend call the requests of `queries` (each one request as `run` will be asked it:
        its keys and requests) that neither the cache nor an earlier prefetch holds. Only whole queries the
        call cap still pays for are fetched, in order, so the model never answers what no one pays for; with
        a token cap nothing is (each bound would be counted twice). Nothing is charged or cached here. An
        outage keeps what was answered, and the first request `run` then asks beyond those stops on it,
        without waiting for the servers a second time: what that request got is booked as an outage books it.

        `together`: the requests are decoded as one set whose members' answers depend on each other (one
        batch), so if any paid one is missing every paid one is asked again, and a run resumed from a cache
        that holds some of them gets the uninterrupted run's answers."""
        if self.ledger.cap_tokens is not None:
            return
        left = self.ledger.remaining_calls()
        todo: dict[str, Request] = {}
        paid: dict[str, Request] = {}
        for keys, requests in queries:
            found = self.cache.get_many(list(dict.fromkeys(keys)))
            if left is not None:  # what `run` will charge: each miss, and each hit another run paid for
                left -= sum(key not in found for key in keys) + len(self.cache.unpaid(list(found)))
                if left < 0:
                    break
            for key, request in zip(keys, requests):
                paid.setdefault(key, request)
                if key not in found and key not in self.ahead:
                    todo.setdefault(key, request)
        missing = set(todo)
        if together and todo:
            todo = paid  # the whole set, so each member is decoded beside the same others
        if len(todo) < 2:  # one request gains nothing from being asked early
            return
        pending = list(todo.items())
        try:
            values = self._compute(compute, [request for _, request in pending])
        except BackendUnavailable as exc:
            values = [result_value(exc.completed[j]) if j in exc.completed else None for j in range(len(pending))]
            exc.completed, self.outage = {}, exc
        self.ahead.update((key, value) for (key, _), value in zip(pending, values)
                          if value is not None and key in missing)

    def _answers(self, keys: Sequence[str], requests: list[Request],
                 compute: Callable[[list[Request]], list[Value]]) -> list[Value]:
        """The values of `keys` (misses): prefetched ones from `ahead`, the rest computed now in one call.
        On an outage, its `completed` becomes the values answered, numbered over all of `keys`."""
        fresh = [j for j, key in enumerate(keys) if key not in self.ahead]
        try:
            if fresh and self.outage is not None:
                outage, self.outage = self.outage, None
                raise outage
            computed = self._compute(compute, [requests[j] for j in fresh]) if fresh else []
        except BackendUnavailable as exc:
            exc.completed = {**{j: self.ahead[key] for j, key in enumerate(keys) if key in self.ahead},
                             **{fresh[i]: result_value(result) for i, result in exc.completed.items()}}
            raise
        values: list[Value | None] = [self.ahead.get(key) for key in keys]
        for j, value in zip(fresh, computed):
            values[j] = value
        for key in keys:
            self.ahead.pop(key, None)
        return [v for v in values if v is not None]

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
        # A key the model answered ahead for this run is this run's miss even if another process stored it
        # since: the model served it here, so it is charged as a call, never as a shared-cache hit.
        missing = [i for i, key in enumerate(keys) if key not in found or key in self.ahead]
        owed = {key: found[key] for key in self.cache.unpaid([key for key in keys
                                                              if key in found and key not in self.ahead])}
        if not missing and not owed:
            return [found[key] for key in keys], [True] * len(keys)
        todo = [requests[i] for i in missing]
        bound = 0
        if self.ledger.cap_tokens is not None:  # only a token cap needs the bound, which tokenizes every prompt
            bound = sum(_tokens(list(owed.values()))) + (sum(bounds(todo)) if todo else 0)
        reservation = self.ledger.reserve({kind: len(missing), kind + SHARED: len(owed)}, bound)
        try:
            values = self._answers([keys[i] for i in missing], todo, compute) if todo else []
        except BackendUnavailable as exc:  # the answers received are kept, and paid for
            answered = {keys[missing[j]]: value for j, value in exc.completed.items()}
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
