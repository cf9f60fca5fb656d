"""Independent groups of dimensions, so constrained spaces stay exact and cheap.

Dimensions linked by a rule form one group; validity is the product of per-group validity.
So the valid count is the product of per-group counts, and drawing each group uniformly
from its own valid combinations gives a uniform draw over all valid candidates. A group small
enough is enumerated once (its table); a larger one is sampled by rejection and counted by a
Monte Carlo estimate with a Wilson interval.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterator, Protocol, Sequence

import numpy as np

from prompttune.search_spaces.constraints import Constraint
from prompttune.statistics.stats import wilson_ci

Combo = tuple[int, ...]
ENUMERATE_LIMIT = 200_000


class NamedValues(Protocol):
    """What grouping reads of a dimension: its name and values (a protocol, so this module never names
    `space.Dimension`, which imports it)."""

    @property
    def name(self) -> str: ...

    @property
    def values(self) -> tuple[Any, ...]: ...


@dataclass
class Group:
    """Dimensions sharing rules; `rules` read only these dimensions."""

    dims: tuple[NamedValues, ...]
    rules: tuple[Constraint, ...]
    enumerate_limit: int = ENUMERATE_LIMIT

    @property
    def nominal(self) -> int:
        return math.prod(len(d.values) for d in self.dims)

    @property
    def enumerable(self) -> bool:
        return not self.rules or self.nominal <= self.enumerate_limit

    def valid(self, combo: Combo) -> bool:
        if not self.rules:
            return True
        values = {d.name: d.values[i] for d, i in zip(self.dims, combo)}
        return all(rule(values) for rule in self.rules)

    def _product(self) -> Iterator[Combo]:
        return itertools.product(*(range(len(d.values)) for d in self.dims))

    @cached_property
    def table(self) -> list[Combo]:
        """All valid combinations, in product order (only for enumerable constrained groups)."""
        return [c for c in self._product() if self.valid(c)]

    def count(self) -> int:
        return self.nominal if not self.rules else len(self.table)

    def combos(self) -> Iterator[Combo]:
        if self.rules and self.enumerable:
            return iter(self.table)
        return (c for c in self._product() if self.valid(c))

    def draw(self, rng: np.random.Generator) -> Combo:
        """One uniform product draw (not necessarily valid)."""
        return tuple(int(rng.integers(len(d.values))) for d in self.dims)

    def sample(self, rng: np.random.Generator, max_tries: int) -> Combo | None:
        """Uniform over this group's valid combinations; None if rejection found none."""
        if self.rules and self.enumerable:
            return self.table[int(rng.integers(len(self.table)))] if self.table else None
        for _ in range(max_tries):
            combo = self.draw(rng)
            if self.valid(combo):
                return combo
        return None


def split_groups(dimensions: Sequence[NamedValues], constraints: Sequence[Constraint],
                 enumerate_limit: int = ENUMERATE_LIMIT) -> list[Group]:
    """Union dimensions read by the same rule; groups come in declaration order."""
    names = [d.name for d in dimensions]
    parent = {n: n for n in names}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for rule in constraints:
        linked = rule.dims if rule.dims is not None else names
        for other in linked[1:]:
            parent[root(other)] = root(linked[0])
    members: dict[str, list[NamedValues]] = {}
    for dim in dimensions:
        members.setdefault(root(dim.name), []).append(dim)
    groups = []
    for dims in members.values():
        inside = {d.name for d in dims}
        rules = tuple(r for r in constraints if (r.dims if r.dims is not None else names)[0] in inside)
        groups.append(Group(tuple(dims), rules, enumerate_limit))
    return groups


@dataclass(frozen=True)
class SpaceSize:
    """Number of valid candidates: exact, or a Monte Carlo estimate with its 95% interval."""

    value: float
    exact: bool
    low: float | None = None
    high: float | None = None
    samples: int = 0

    def __str__(self) -> str:
        if self.exact:
            return f"{int(self.value):,} (exact)"
        return (f"≈ {self.value:,.0f} (estimate from {self.samples:,} samples, 95% CI "
                f"{self.low:,.0f} – {self.high:,.0f})")


def count_valid(groups: Sequence[Group], samples: int = 20_000, seed: int = 0) -> SpaceSize:
    """Exact product of group counts, estimating only the groups too large to enumerate."""
    exact_part = math.prod(g.count() for g in groups if g.enumerable)
    large = [g for g in groups if not g.enumerable]
    if not large:
        return SpaceSize(exact_part, True)
    rng = np.random.default_rng(seed)
    hits = sum(all(g.valid(g.draw(rng)) for g in large) for _ in range(samples))
    scale = exact_part * math.prod(g.nominal for g in large)
    low, high = wilson_ci(hits, samples)
    return SpaceSize(scale * hits / samples, False, scale * low, scale * high, samples)
