"""Search spaces: named dimensions whose assignment builds a PromptSpec.

A candidate is an assignment {dimension name: value index}; its id hashes the canonical
(name-sorted) assignment, so it is unchanged by the order dimensions are declared in.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from prompttune.errors import UserError
from prompttune.search_spaces.prompt import PromptSpec

Assignment = dict[str, int]


@dataclass(frozen=True)
class Dimension:
    """One searchable choice.

    `target` names what the value sets: a PromptSpec field (e.g. "output_template"), or
    "slot:NAME" to fill `{NAME}` inside the instruction text (a word slot).
    """

    name: str
    values: tuple[Any, ...]
    target: str
    kind: str = "choice"

    def __post_init__(self) -> None:
        if not self.values:
            raise UserError(f"dimension {self.name!r} has no values")

    def label(self, index: int) -> str:
        value = self.values[index]
        return repr(value) if isinstance(value, str) else json.dumps(value)


Constraint = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class Candidate:
    """A point of the space; `spec` is the fully built prompt design."""

    id: str
    assignment: tuple[tuple[str, int], ...]
    spec: PromptSpec

    def values(self, space: "SearchSpace") -> dict[str, Any]:
        return {name: space.dimension(name).values[i] for name, i in self.assignment}


def candidate_id(assignment: Assignment, space_name: str = "") -> str:
    canonical = json.dumps(sorted(assignment.items()), separators=(",", ":"))
    return hashlib.sha1(f"{space_name}|{canonical}".encode()).hexdigest()[:12]


@dataclass
class SearchSpace:
    """Dimensions over a base PromptSpec, with validity constraints over dimension values."""

    name: str
    base: PromptSpec
    dimensions: list[Dimension]
    constraints: list[Constraint] = field(default_factory=list)
    default: Assignment = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [d.name for d in self.dimensions]
        if len(set(names)) != len(names):
            raise UserError(f"space {self.name!r}: duplicate dimension names")
        self._by_name = {d.name: d for d in self.dimensions}
        self.default = {d.name: self.default.get(d.name, 0) for d in self.dimensions}

    def dimension(self, name: str) -> Dimension:
        return self._by_name[name]

    def is_valid(self, assignment: Assignment) -> bool:
        values = {n: self._by_name[n].values[i] for n, i in assignment.items()}
        return all(rule(values) for rule in self.constraints)

    def build(self, assignment: Assignment) -> Candidate:
        """Apply each dimension's value to the base spec; slots fill the instruction text."""
        updates: dict[str, Any] = {}
        slots: dict[str, str] = {}
        for dim in self.dimensions:
            value = dim.values[assignment[dim.name]]
            if dim.target.startswith("slot:"):
                slots[dim.target[5:]] = value
            else:
                updates[dim.target] = tuple(value) if isinstance(value, list) else value
        spec = self.base.with_updates(**updates)
        if slots:
            spec = spec.with_updates(instruction=fill_slots(spec.instruction, slots))
        canonical = tuple(sorted(assignment.items()))
        return Candidate(candidate_id(assignment, self.name), canonical, spec)

    def default_candidate(self) -> Candidate:
        return self.build(self.default)

    def nominal_size(self) -> int:
        return math.prod(len(d.values) for d in self.dimensions)

    def enumerate(self) -> Iterator[Assignment]:
        """All valid assignments in a fixed order (only sensible for small spaces)."""
        names = [d.name for d in self.dimensions]
        for combo in itertools.product(*(range(len(d.values)) for d in self.dimensions)):
            assignment = dict(zip(names, combo))
            if self.is_valid(assignment):
                yield assignment

    def sample(self, rng: np.random.Generator, max_tries: int = 10_000) -> Assignment:
        """Uniform over valid assignments: rejection sampling from the uniform product."""
        for _ in range(max_tries):
            assignment = {d.name: int(rng.integers(len(d.values))) for d in self.dimensions}
            if self.is_valid(assignment):
                return assignment
        raise UserError(f"space {self.name!r}: no valid candidate found in {max_tries} samples")

    def neighbours(self, assignment: Assignment) -> list[Assignment]:
        """Valid assignments differing in exactly one dimension (coordinate search)."""
        result = []
        for dim in self.dimensions:
            for i in range(len(dim.values)):
                if i != assignment[dim.name]:
                    other = {**assignment, dim.name: i}
                    if self.is_valid(other):
                        result.append(other)
        return result

    def diff(self, a: Candidate, b: Candidate) -> str:
        """Human-readable change list, e.g. "field_separator ': ' → ' :: '"."""
        before, after = dict(a.assignment), dict(b.assignment)
        changes = [f"{name} {self._by_name[name].label(before[name])} → "
                   f"{self._by_name[name].label(after[name])}"
                   for name in sorted(before) if before[name] != after.get(name)]
        return ", ".join(changes) or "no change"


def fill_slots(text: str, slots: dict[str, str]) -> str:
    """Replace `{slot}` markers only (not `{labels}` or other placeholders)."""
    for name, word in slots.items():
        text = text.replace("{" + name + "}", word)
    return text
