"""Search spaces: named dimensions whose assignment builds a PromptSpec.

A candidate is an assignment {dimension name: value index}. Its id hashes the dimension names
with their values (not indices), so neither the order of dimensions nor the order of values in
a file changes it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from prompttune.core.errors import UserError
from prompttune.core.types import Example
from prompttune.search_spaces.constraints import Constraint, as_constraint, show_value
from prompttune.search_spaces.frozen import missing_frozen
from prompttune.search_spaces.groups import ENUMERATE_LIMIT, Group, SpaceSize, count_valid, split_groups
from prompttune.search_spaces.prompt import PromptSpec, select_demos

Assignment = dict[str, int]
Composer = Callable[[PromptSpec, Mapping[str, Any], Sequence[Example]], PromptSpec]
"""Turns grammar parts (and, for demos, the train pool) into PromptSpec fields."""

SPEC_FIELDS = frozenset(f.name for f in fields(PromptSpec))
TARGET_PREFIXES = ("slot", "label", "input", "part")
_SHOWN_CHARS = 40


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class Dimension:
    """One searchable choice.

    `target` says what the value sets: a PromptSpec field (e.g. "output_template");
    "slot:NAME" fills `{NAME}` in the instruction; "label:I" sets the word of class I;
    "input:FIELD" sets that input field's template; "part:KEY" hands the value to a composer.
    `title` is how diffs name it (default: the name).
    """

    name: str
    values: tuple[Any, ...]
    target: str
    kind: str = "choice"
    title: str = ""

    def __post_init__(self) -> None:
        if not self.values:
            raise UserError(f"dimension {self.name!r} has no values")
        if len({canonical(v) for v in self.values}) != len(self.values):
            raise UserError(f"dimension {self.name!r} lists a value twice")
        prefix, _, key = self.target.partition(":")
        if not (prefix in TARGET_PREFIXES if key else self.target in SPEC_FIELDS):
            raise UserError(f"dimension {self.name!r}: unknown target {self.target!r}")

    def label(self, index: int) -> str:
        text = show_value(self.values[index])
        return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS - 1] + "…"

    def index(self, value: Any) -> int:
        key = canonical(value)
        for i, v in enumerate(self.values):
            if canonical(v) == key:
                return i
        raise KeyError(value)


@dataclass(frozen=True)
class Candidate:
    """A point of the space; `spec` is the fully built prompt design."""

    id: str
    assignment: tuple[tuple[str, int], ...]
    spec: PromptSpec

    def values(self, space: "SearchSpace") -> dict[str, Any]:
        return {name: space.dimension(name).values[i] for name, i in self.assignment}


def candidate_id(values: Mapping[str, Any], space_name: str = "") -> str:
    """Hash of the name-sorted (name, value) pairs."""
    canonical_pairs = canonical(sorted(values.items()))
    return hashlib.sha1(f"{space_name}|{canonical_pairs}".encode()).hexdigest()[:12]


def fill_slots(text: str, slots: Mapping[str, str]) -> str:
    """Replace `{slot}` markers only (not `{labels}` or other placeholders)."""
    for name, word in slots.items():
        text = text.replace("{" + name + "}", word)
    return text


@dataclass
class SearchSpace:
    """Dimensions over a base PromptSpec, with validity constraints over dimension values.

    Plain callables in `constraints` become rules over all dimensions. `composers` run in order
    after the dimension values are applied; `demo_pool` is the train split the few-shot composer
    draws from (see `bind`). `notes` say how the space was built where a reader should know it
    (where its baseline came from, what was added to it): `space show` and the run report print them.
    `frozen` texts are kept verbatim by every candidate the search scores (`freezing`).
    """

    name: str
    base: PromptSpec
    dimensions: list[Dimension]
    constraints: list[Constraint | Callable[[Mapping[str, Any]], bool]] = field(default_factory=list)
    default: Assignment = field(default_factory=dict)
    composers: list[Composer] = field(default_factory=list)
    demo_pool: tuple[Example, ...] = ()
    enumerate_limit: int = ENUMERATE_LIMIT
    notes: tuple[str, ...] = ()
    frozen: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        names = [d.name for d in self.dimensions]
        if len(set(names)) != len(names):
            raise UserError(f"space {self.name!r}: duplicate dimension names")
        self._by_name = {d.name: d for d in self.dimensions}
        self.constraints = [as_constraint(rule) for rule in self.constraints]
        for rule in self.constraints:
            unknown = [n for n in rule.dims or () if n not in self._by_name]
            if unknown or rule.dims == ():
                raise UserError(f"space {self.name!r}: rule {rule.describe()!r} reads unknown "
                                f"dimensions {unknown or '(none)'}")
        self.default = {d.name: self.default.get(d.name, 0) for d in self.dimensions}

    def bind(self, pool: Sequence[Example]) -> "SearchSpace":
        """The same space drawing few-shot demos from `pool` (the task's train split)."""
        return replace(self, demo_pool=tuple(pool))

    def freezing(self, texts: Sequence[str], source: str) -> "SearchSpace":
        """The space whose candidates must each keep `texts` verbatim (the search driver rejects one that does
        not); a text its baseline lacks is refused here, before any model loads."""
        if not texts:
            return self
        baseline = self.default_candidate().spec
        demos = select_demos(baseline, {e.id: e for e in self.demo_pool})
        if missing := missing_frozen(baseline, demos, texts):
            raise UserError(f"{source}: frozen text {missing[0]!r} is not in the baseline prompt as rendered "
                            f"(placeholders filled in, surrounding whitespace dropped); list exact text of the prompt")
        return replace(self, frozen=tuple(dict.fromkeys([*self.frozen, *texts])))

    def dimension(self, name: str) -> Dimension:
        return self._by_name[name]

    def with_demos(self, most: int) -> "SearchSpace":
        """The space with a few-shot dimension k ∈ {0, 2, 4, …, most} (random train demos) added, where
        it declares none: how `compare --mode native --native-demos K` lets grid searchers try demos."""
        from prompttune.search_spaces.demos import FewShot

        if most < 1 or any(d.kind == "few_shot" for d in self.dimensions):
            return self
        ks = tuple(sorted({0, *range(2, most + 1, 2), most}))
        return replace(self, dimensions=[*self.dimensions, Dimension("few_shot.k", ks, "part:few_shot.k", "few_shot", "k")],
                       default={**self.default, "few_shot.k": 0}, composers=[*self.composers, FewShot()])

    def with_chat_toggle(self) -> "SearchSpace":
        """The space with the chat template on or off (the baseline's setting first), where it has no such
        dimension: under `serve: generate` whether the model answers with a label at all often turns on it (an
        instruction-tuned model answers in its assistant turn and stops; as plain text it writes on)."""
        if any(d.target == "chat" for d in self.dimensions):
            return self
        return replace(self, dimensions=[*self.dimensions, Dimension("chat", (self.base.chat, not self.base.chat), "chat")],
                       default={**self.default, "chat": 0})

    def searching_only(self, names: Sequence[str]) -> "SearchSpace":
        """The same space with every dimension not in `names` held at its baseline value (one value
        left), so its rules, candidate ids and baseline stay those of the full space."""
        if unknown := [n for n in names if n not in self._by_name]:
            raise UserError(f"space {self.name!r} has no dimension {', '.join(map(repr, unknown))} "
                            f"(it has: {', '.join(self._by_name)})")
        held = [replace(d, values=(d.values[self.default[d.name]],)) if d.name not in names else d
                for d in self.dimensions]
        return replace(self, dimensions=held, default={d.name: 0 if d.name not in names else self.default[d.name]
                                                       for d in self.dimensions})

    def fingerprint(self) -> str:
        """Hash of what defines the candidates (name, baseline spec, dimensions with their values,
        default, rules), so two runs can show they searched the same space."""
        base = {"calibrate": self.base.calibrate, **self.base.hashed_fields()}  # hashes as before label_bias existed
        payload = {"name": self.name, "base": base, "default": self.default,
                   "dimensions": [[d.name, d.target, d.kind, list(d.values)] for d in self.dimensions],
                   "rules": [rule.describe() for rule in self.constraints]}
        return hashlib.sha256(canonical(payload).encode()).hexdigest()[:12]

    def values_of(self, assignment: Mapping[str, int]) -> dict[str, Any]:
        return {n: self._by_name[n].values[i] for n, i in assignment.items()}

    def assignment_of(self, values: Mapping[str, Any]) -> Assignment:
        """The baseline with some dimensions set by value (e.g. {"format.separator": " : "})."""
        return {**self.default, **{n: self._by_name[n].index(v) for n, v in values.items()}}

    def is_valid(self, assignment: Assignment) -> bool:
        values = self.values_of(assignment)
        return all(rule(values) for rule in self.constraints)

    def build(self, assignment: Assignment) -> Candidate:
        """Apply each dimension's value to the base spec, then run the composers."""
        updates: dict[str, Any] = {}
        targeted: dict[str, dict[str, Any]] = {p: {} for p in TARGET_PREFIXES}
        for dim in self.dimensions:
            value = dim.values[assignment[dim.name]]
            prefix, _, key = dim.target.partition(":")
            if key:
                targeted[prefix][key] = value
            else:
                updates[dim.target] = tuple(value) if isinstance(value, list) else value
        spec = self.base.with_updates(**updates)
        if targeted["label"]:
            words = [targeted["label"].get(str(i), w) for i, w in enumerate(spec.label_words)]
            spec = spec.with_updates(label_words=tuple(words))
        if targeted["input"]:
            spec = spec.with_updates(input_templates=tuple(
                (f, targeted["input"].get(f, t)) for f, t in spec.input_templates))
        if targeted["slot"]:
            spec = spec.with_updates(instruction=fill_slots(spec.instruction, targeted["slot"]))
        for composer in self.composers:
            spec = composer(spec, targeted["part"], self.demo_pool)
        values = self.values_of(assignment)
        return Candidate(candidate_id(values, self.name), tuple(sorted(assignment.items())), spec)

    def default_candidate(self) -> Candidate:
        return self.build(self.default)

    def distinct_candidates(self, rng: np.random.Generator, n: int,
                            first: Sequence[Candidate] = ()) -> list[Candidate]:
        """Up to n distinct valid candidates (by id), `first` leading: all of them in random order
        when the space has no more than n, else uniform draws (at most 50 n) until n are found."""
        chosen = {c.id: c for c in first}
        size = self.size()
        if size.exact and size.value <= n:
            pool = [self.build(a) for a in self.enumerate()]
            draws: Iterable[Candidate] = (pool[i] for i in rng.permutation(len(pool)))
        else:
            draws = (self.build(self.sample(rng)) for _ in range(50 * n))
        for candidate in draws:
            if len(chosen) >= n:
                break
            chosen.setdefault(candidate.id, candidate)
        return list(chosen.values())

    def nominal_size(self) -> int:
        return math.prod(len(d.values) for d in self.dimensions)

    @cached_property
    def groups(self) -> list[Group]:
        return split_groups(self.dimensions, self.constraints, self.enumerate_limit)

    def size(self) -> SpaceSize:
        """Valid candidates: exact where groups can be enumerated, else an estimate with CI."""
        return count_valid(self.groups)

    def enumerate(self) -> Iterator[Assignment]:
        """All valid assignments in a fixed order (only sensible for small spaces)."""
        for parts in itertools.product(*(list(g.combos()) for g in self.groups)):
            yield {d.name: i for g, combo in zip(self.groups, parts) for d, i in zip(g.dims, combo)}

    def sample(self, rng: np.random.Generator, max_tries: int = 10_000) -> Assignment:
        """Uniform over valid assignments: each independent group uniformly over its valid part."""
        assignment: Assignment = {}
        for group in self.groups:
            combo = group.sample(rng, max_tries)
            if combo is None:
                raise UserError(f"space {self.name!r}: no valid value found for "
                                f"{', '.join(d.name for d in group.dims)}")
            assignment.update({d.name: i for d, i in zip(group.dims, combo)})
        return {d.name: assignment[d.name] for d in self.dimensions}

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
        """Human-readable change list, e.g. "separator ': ' → ' :: ', word 'only' → 'solely'"."""
        before, after = dict(a.assignment), dict(b.assignment)
        changes = []
        for dim in self.dimensions:
            if dim.name in before and before[dim.name] != after.get(dim.name):
                changes.append(f"{dim.title or dim.name} {dim.label(before[dim.name])} → "
                               f"{dim.label(after[dim.name])}")
        return ", ".join(changes) or "no change"
