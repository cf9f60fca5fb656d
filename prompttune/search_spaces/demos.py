"""Few-shot demos: (k, selection, order seed) → concrete train example ids, deterministically.

The pool is the task's train split, sorted by id so the result does not depend on how the
split happens to be ordered. Each selection draws from one seeded permutation, so the demos of
k=2 extend those of k=1 (nested sets), and the order seed only permutes the drawn demos.
Selections are a registry: the bootstrapped-demos optimizer adds its own with
`register_demo_selection`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from prompttune.core.errors import UserError
from prompttune.core.types import Example
from prompttune.search_spaces.prompt import PromptSpec

DemoSelection = Callable[[Sequence[Example], int, np.random.Generator], list[Example]]


def _random(pool: Sequence[Example], k: int, rng: np.random.Generator) -> list[Example]:
    return [pool[i] for i in rng.permutation(len(pool))[:k]]


def _balanced(pool: Sequence[Example], k: int, rng: np.random.Generator) -> list[Example]:
    """Round-robin over classes (each class shuffled), so k ≥ #classes shows every class."""
    by_label: dict[int, list[Example]] = {}
    for i in rng.permutation(len(pool)):
        by_label.setdefault(pool[i].label, []).append(pool[i])
    queues = [by_label[c] for c in sorted(by_label)]
    rounds = max((len(q) for q in queues), default=0)
    ordered = [q[r] for r in range(rounds) for q in queues if r < len(q)]
    return ordered[:k]


DEMO_SELECTIONS: dict[str, DemoSelection] = {"random": _random, "balanced": _balanced}


def register_demo_selection(name: str, selection: DemoSelection) -> None:
    """Hook for strategies that arrive later (e.g. bootstrapped demos)."""
    DEMO_SELECTIONS[name] = selection


def choose_demos(pool: Sequence[Example], k: int, selection: str, order: int,
                 draw_seed: int = 0) -> tuple[str, ...]:
    """Ids of k demos from the (id-sorted) pool; order 0 keeps the draw order."""
    if k == 0:
        return ()
    if selection not in DEMO_SELECTIONS:
        raise UserError(f"unknown demo selection {selection!r}; known: {', '.join(DEMO_SELECTIONS)}")
    if k > len(pool):
        raise UserError(f"few-shot k={k} needs {k} train examples, the pool has {len(pool)} "
                        f"(bind the space to the task's train split, or raise --train-size)")
    ordered = sorted(pool, key=lambda e: e.id)
    chosen = DEMO_SELECTIONS[selection](ordered, k, np.random.default_rng(draw_seed))
    if order:
        chosen = [chosen[i] for i in np.random.default_rng(order).permutation(len(chosen))]
    return tuple(d.id for d in chosen)


class FewShot:
    """Composer that turns the parts few_shot.k / .selection / .order into `spec.demo_ids`."""

    def __init__(self, draw_seed: int = 0) -> None:
        self.draw_seed = draw_seed

    def __call__(self, spec: PromptSpec, parts: Mapping[str, Any],
                 pool: Sequence[Example]) -> PromptSpec:
        ids = choose_demos(pool, parts.get("few_shot.k", 0), parts.get("few_shot.selection", "random"),
                           parts.get("few_shot.order", 0), self.draw_seed)
        return spec.with_updates(demo_ids=ids)
