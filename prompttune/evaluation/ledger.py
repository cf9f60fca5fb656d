"""The budget ledger: every model call and token is counted here, and the cap is hard."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from prompttune.backends.base import Backend, Request
from prompttune.core.errors import BudgetExhausted


@dataclass
class BudgetLedger:
    """Counts calls (one per example per rendered prompt, one per proposer request) and tokens.

    `reserve` is called before the backend is, so a request that would pass the cap never runs:
    the ledger always equals the calls actually made. Under a token cap it is given the most
    tokens the request can use (`reserve_requests` asks the backend), so the token cap holds too.
    """

    cap_calls: int | None = None
    cap_tokens: int | None = None
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls_by_kind: Counter = field(default_factory=Counter)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def remaining_calls(self) -> int | None:
        return None if self.cap_calls is None else self.cap_calls - self.calls

    def reserve(self, n_calls: int, kind: str, max_tokens: int = 0) -> None:
        """Charge `n_calls` that may use up to `max_tokens` (their tokens are added once known)."""
        if self.cap_calls is not None and self.calls + n_calls > self.cap_calls:
            raise BudgetExhausted(f"{kind}: {n_calls} calls requested, {self.cap_calls - self.calls} "
                                  f"left of the cap {self.cap_calls}")
        if self.cap_tokens is not None and self.tokens + max_tokens > self.cap_tokens:
            raise BudgetExhausted(f"{kind}: up to {max_tokens} tokens requested, "
                                  f"{self.cap_tokens - self.tokens} left of the token cap {self.cap_tokens}")
        self.calls += n_calls
        self.calls_by_kind[kind] += n_calls

    def reserve_requests(self, backend: Backend, requests: Sequence[Request], kind: str) -> None:
        """`reserve` for requests about to reach `backend`; their token bound is counted only
        under a token cap (it tokenizes every prompt)."""
        bounds = backend.token_bounds(requests) if self.cap_tokens is not None else None
        self.reserve(len(requests), kind, sum(bounds or ()))

    def add_tokens(self, prompt_tokens: int, completion_tokens: int) -> None:
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens

    def summary(self) -> dict:
        return {"calls": self.calls, "cap_calls": self.cap_calls, "cap_tokens": self.cap_tokens,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "calls_by_kind": dict(self.calls_by_kind)}
