"""A per-run, metered view of a cache that other runs (or an interrupted run) filled.

Compared arms share one SQLite cache, `--cache FILE` shares one across runs, and a resumed run
replays its asks through the cache its interrupted run filled. In each case nothing is computed
twice, but a hit on an entry this run has not itself produced must not make its search cheaper.
`MeteredCache` therefore names such hits (`unpaid`), and the run's `Meter` charges each of them
exactly as it would have charged a miss: one call per requested item and the entry's recorded
tokens, in the same reservation as the request's misses. The misses plus these charges equal what
the run would have paid with a private, empty cache — so a replay is charged once, and the caps
are never exceeded.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from prompttune.scoring.cache import ResultCache


class MeteredCache:
    """Duck-types `ResultCache` for a `Meter`; the shared cache stays open (its owner closes it)."""

    def __init__(self, shared: ResultCache) -> None:
        self.shared = shared
        self.known: set[str] = set()
        self.foreign_calls = 0
        self.foreign_tokens = 0

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        return self.shared.get_many(keys)

    def unpaid(self, keys: list[str]) -> list[str]:
        """The hits among `keys` that this run neither computed nor has paid for yet."""
        return [k for k in keys if k not in self.known]

    def mark_paid(self, hits: Mapping[str, Any]) -> None:
        """`hits` (values by key) were charged to this run's ledger: from now on they are its own,
        and free. Counted apart (`foreign_calls`, `foreign_tokens`): they reached no model, which
        compare's served-equals-charged check needs to know."""
        self.known.update(hits)
        self.foreign_calls += len(hits)
        self.foreign_tokens += sum(v["prompt_tokens"] + v["completion_tokens"] for v in hits.values())

    def put_many(self, items: Iterable[tuple[str, Any]]) -> None:
        items = list(items)
        self.known.update(k for k, _ in items)
        self.shared.put_many(items)

    def __len__(self) -> int:
        return len(self.shared)
