"""The budget ledger: every model call and token is counted here, and both caps are hard."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping

from prompttune.core.errors import BudgetExhausted

log = logging.getLogger(__name__)

SHARED = " (shared cache)"  # suffix of a kind of call served from a cache another run filled


@dataclass(frozen=True)
class Reservation:
    """Calls and tokens set aside for one request before the backend sees it."""

    calls: Mapping[str, int]
    tokens: int


@dataclass
class BudgetLedger:
    """Counts calls (one per example per rendered prompt, one per proposer request, one per
    embedded text) and tokens.

    `reserve` is called before the backend is, with the request's calls and an upper bound of its
    tokens, so a request that would pass either cap never runs; `settle` then books the tokens the
    backend reported. The ledger always equals the calls actually made.
    """

    cap_calls: int | None = None
    cap_tokens: int | None = None
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reserved_tokens: int = 0  # set aside for requests in flight, not yet settled
    calls_by_kind: Counter = field(default_factory=Counter)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def computed_calls(self) -> int:
        """The calls the model answered for this ledger: all but the shared-cache hits it paid for,
        which take no model time (a rate measured on those would promise a run in no time)."""
        return self.calls - sum(n for kind, n in self.calls_by_kind.items() if kind.endswith(SHARED))

    def remaining_calls(self) -> int | None:
        return None if self.cap_calls is None else self.cap_calls - self.calls

    def reserve(self, calls: Mapping[str, int], tokens: int) -> Reservation:
        """Count `calls` (by kind) and set `tokens` aside, or refuse the whole request."""
        n_calls, kinds = sum(calls.values()), ", ".join(k for k, n in calls.items() if n)
        if self.cap_calls is not None and self.calls + n_calls > self.cap_calls:
            raise BudgetExhausted(f"{kinds}: {n_calls} calls requested, {self.cap_calls - self.calls} "
                                  f"left of the cap {self.cap_calls}")
        left = None if self.cap_tokens is None else self.cap_tokens - self.tokens - self.reserved_tokens
        if left is not None and tokens > left:
            raise BudgetExhausted(f"{kinds}: up to {tokens} tokens requested, {left} left of the token "
                                  f"cap {self.cap_tokens}")
        self.calls += n_calls
        self.calls_by_kind.update({kind: n for kind, n in calls.items() if n})
        self.reserved_tokens += tokens
        return Reservation(dict(calls), tokens)

    def settle(self, reservation: Reservation, prompt_tokens: int, completion_tokens: int,
               made: Mapping[str, int] | None = None) -> None:
        """Book the tokens the request really cost in place of its reserve. `made` names the calls
        answered when an outage cut the request short (by kind); the others are given back."""
        self.reserved_tokens -= reservation.tokens
        if made is not None:
            self._uncount(Counter(reservation.calls) - Counter(made))
        if self.cap_tokens is not None and prompt_tokens + completion_tokens > reservation.tokens:
            # Only a backend whose bound is not one (an OpenAI server with another --tokenizer)
            # gets here; the ledger keeps the truth.
            log.warning("a request cost %d tokens, more than the %d reserved for it: the token cap may be "
                        "passed", prompt_tokens + completion_tokens, reservation.tokens)
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens

    def release(self, reservation: Reservation) -> None:
        """Undo a reservation whose request failed: it produced nothing the run can use."""
        self.reserved_tokens -= reservation.tokens
        self._uncount(reservation.calls)

    def _uncount(self, calls: Mapping[str, int]) -> None:
        self.calls -= sum(calls.values())
        self.calls_by_kind.subtract(calls)
        self.calls_by_kind += Counter()  # drop kinds left at zero

    def summary(self) -> dict:
        return {"calls": self.calls, "cap_calls": self.cap_calls, "cap_tokens": self.cap_tokens,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "calls_by_kind": dict(self.calls_by_kind)}
