"""A per-run, metered view of a cache that other runs (or an interrupted run) filled.

Compared arms share one SQLite cache, `--cache FILE` shares one across runs, and a resumed run
replays its asks through the cache its interrupted run filled. In each case nothing is computed
twice, but a hit on an entry this run has not itself produced must not make its search cheaper.
`MeteredCache` therefore charges its run's ledger for every such hit exactly as the evaluator
would have charged a miss: one call per requested item and the entry's recorded tokens. The
evaluator's own miss-charging plus this charging equal what the run would have paid with a
private, empty cache — so a replay is charged once, and the cap is never exceeded.

One difference remains under a token cap: the misses' tokens are counted by the evaluator after
this view has charged the hits, so a request whose hits fit the token cap but whose misses do not
is refused with its hits already charged (a run alone would have been refused before any); the
spend still stays within the cap, and the search stops there.
"""

from __future__ import annotations

from typing import Any, Iterable

from prompttune.core.errors import BudgetExhausted
from prompttune.evaluation.cache import ResultCache
from prompttune.evaluation.ledger import BudgetLedger


class MeteredCache:
    """Duck-types `ResultCache` for an `Evaluator`; the shared cache stays open (its owner closes it)."""

    def __init__(self, shared: ResultCache, ledger: BudgetLedger) -> None:
        self.shared = shared
        self.ledger = ledger
        self.known: set[str] = set()
        self.foreign_calls = 0
        self.foreign_tokens = 0

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        found = self.shared.get_many(keys)
        foreign = [k for k in keys if k in found and k not in self.known]
        if foreign:
            misses = sum(k not in found for k in keys)
            remaining = self.ledger.remaining_calls()
            # Refuse the whole request up front, as a run alone would have: charging the
            # foreign hits and then having the evaluator refuse the misses would bill a
            # request that never ran.
            if remaining is not None and len(foreign) + misses > remaining:
                raise BudgetExhausted(f"{len(foreign) + misses} calls requested (shared-cache hits "
                                      f"included), {remaining} left of the cap {self.ledger.cap_calls}")
            values = [found[k] for k in foreign]
            kind = "score" if "logprobs" in values[0] else "generate"
            prompt_tokens = sum(v["prompt_tokens"] for v in values)
            completion_tokens = sum(v["completion_tokens"] for v in values)
            self.ledger.reserve(len(foreign), f"{kind} (shared cache)", prompt_tokens + completion_tokens)
            self.ledger.add_tokens(prompt_tokens, completion_tokens)
            self.known.update(foreign)
            self.foreign_calls += len(foreign)
            self.foreign_tokens += prompt_tokens + completion_tokens
        return found

    def put_many(self, items: Iterable[tuple[str, Any]]) -> None:
        items = list(items)
        self.known.update(k for k, _ in items)
        self.shared.put_many(items)

    def __len__(self) -> int:
        return len(self.shared)
