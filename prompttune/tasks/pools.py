"""Tuning and reporting pools: every built-in task split once, by a stable hash of each example's text, into
examples tuning may draw and examples only a reported run may test on.

A headline figure is honest only if no choice made while tuning saw its test examples. Split seeds alone do
not give that (two draws of one pool share examples), so the partition is by example: `pool="tuning"`
draws train, dev and test from the tuning part only; `pool="reporting"` draws test from the reporting part
and train and dev from the tuning part (selection data a reported run may share with tuning runs). The
default, `pool="all"`, draws from everything as before the partition existed, so earlier results replay.
"""

from __future__ import annotations

import hashlib
import sys
from typing import Callable, Iterable, Literal

from prompttune.core.errors import UserError
from prompttune.core.types import Example

Pool = Literal["all", "tuning", "reporting"]
POOLS: tuple[Pool, ...] = ("all", "tuning", "reporting")
REPORTING_SHARE = 0.5
"""Share of each task's test source held for reporting: enough for 1000-example test draws per seed
(agnews 7,600 rows, trec ~5,400 questions, sst2 ~7,000 train sentences) with the rest left to tune on."""

REPORTING_SPLIT_SEEDS = range(100, 110)
"""Split seeds declared for the headline runs: 100-104 (docs/results/headline_protocol.md) and 105-109
(docs/results/headline_protocol_v2.md). No tuning may use them."""


def normalized(text: str) -> str:
    """The text as the hash sees it: lower case, single spaces (so a re-tokenized copy lands in the same part)."""
    return " ".join(text.lower().split())


def example_text(example: Example) -> str:
    """What identifies an example across sources (ids differ between files and the hub): its normalized fields."""
    return " \n ".join(normalized(str(example.fields[name])) for name in sorted(example.fields))


def in_reporting_part(text: str) -> bool:
    """Stable across processes and machines (sha256, not Python's salted `hash`)."""
    digest = hashlib.sha256(normalized(text).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < REPORTING_SHARE


def partition(pools: dict[str, list[Example]], pool: Pool,
              is_reporting: Callable[[Example], bool] | None = None) -> dict[str, list[Example]]:
    """`pools` (split name -> source list) restricted to `pool`'s part: every split to the tuning part, except
    test to the reporting part when `pool` is "reporting". `is_reporting` defaults to the hash of the example's
    text. Lists that were one shared pool stay one shared list (make_splits keeps their splits disjoint)."""
    if pool == "all":
        return pools
    if pool not in POOLS:
        raise UserError(f"pool {pool!r}: use one of {', '.join(POOLS)}")
    reporting = is_reporting or (lambda example: in_reporting_part(example_text(example)))
    filtered: dict[int, dict[bool, list[Example]]] = {}

    def part(source: list[Example], want_reporting: bool) -> list[Example]:
        parts = filtered.setdefault(id(source), {})
        if want_reporting not in parts:
            parts[want_reporting] = [ex for ex in source if reporting(ex) == want_reporting]
        return parts[want_reporting]

    return {split: part(source, pool == "reporting" and split == "test") for split, source in pools.items()}


def require_tuning(pool: str, split_seeds: Iterable[int], what: str) -> None:
    """A script that tunes, or looks at a run's test split to decide something, must not touch what the headline
    reports: refuse the reporting pool and the declared reporting split seeds."""
    if pool == "reporting":
        raise UserError(f"{what}: the reporting pool is for the headline run only; tune with pool 'tuning'")
    if used := sorted(set(split_seeds) & set(REPORTING_SPLIT_SEEDS)):
        raise UserError(f"{what}: split seed(s) {', '.join(map(str, used))} are reporting seeds "
                        f"({REPORTING_SPLIT_SEEDS.start}-{REPORTING_SPLIT_SEEDS.stop - 1}, "
                        f"docs/results/headline_protocol*.md); tune on other seeds")


def exit_unless_tuning(pool: str, split_seeds: Iterable[int], what: str) -> None:
    """`require_tuning` for scripts: the refusal as one line on stderr and exit status 2, not a traceback."""
    try:
        require_tuning(pool, split_seeds, what)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def seen_in_tuning(test: Iterable[Example], tuning_pool: Iterable[Example]) -> list[str]:
    """The ids of the test examples whose text is in the tuning pool (every tuning draw is a subset of it),
    compared by normalized text since ids differ across sources: empty when a report may say that no test
    example appears in any tuning draw."""
    seen = {example_text(ex) for ex in tuning_pool}
    return [ex.id for ex in test if example_text(ex) in seen]
