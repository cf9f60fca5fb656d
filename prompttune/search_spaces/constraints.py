"""Validity rules over dimension values.

Every rule names the dimensions it reads (`dims`), so the space can split itself into
independent groups and count, sample and enumerate each group on its own. A rule with
`dims = None` reads everything (a plain Python callable: correct, but counted as one group).
YAML rules are data (`When`, `Forbid`), never evaluated code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

Values = Mapping[str, Any]


@runtime_checkable
class Constraint(Protocol):
    """A predicate over {dimension name: value}; True means valid."""

    dims: tuple[str, ...] | None

    def __call__(self, values: Values) -> bool: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class Rule:
    """A Python predicate with a name, reading only `dims` (None: all dimensions)."""

    name: str
    predicate: Callable[[Values], bool]
    dims: tuple[str, ...] | None = None

    def __call__(self, values: Values) -> bool:
        return bool(self.predicate(values))

    def describe(self) -> str:
        return self.name


def show_value(value: Any) -> str:
    """Strings as Python literals (escapes visible), everything else as JSON."""
    return repr(value) if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _matches(values: Values, condition: Mapping[str, tuple[Any, ...]]) -> bool:
    return all(values[name] in allowed for name, allowed in condition.items())


def _condition_text(condition: Mapping[str, tuple[Any, ...]]) -> str:
    return ", ".join(f"{name}={show_value(a[0])}" if len(a) == 1 else
                     f"{name}∈{{{', '.join(show_value(v) for v in a)}}}" for name, a in condition.items())


@dataclass(frozen=True)
class When:
    """If every `when` dimension takes one of its listed values, each `then` one must too."""

    when: Mapping[str, tuple[Any, ...]]
    then: Mapping[str, tuple[Any, ...]]
    dims: tuple[str, ...] | None = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", tuple(dict.fromkeys([*self.when, *self.then])))

    def __call__(self, values: Values) -> bool:
        return not _matches(values, self.when) or _matches(values, self.then)

    def describe(self) -> str:
        head = f"when {_condition_text(self.when)} " if self.when else ""
        return f"{head}then {_condition_text(self.then)}"


@dataclass(frozen=True)
class Forbid:
    """This combination of values (each dimension one of its listed values) is invalid."""

    values: Mapping[str, tuple[Any, ...]]
    dims: tuple[str, ...] | None = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", tuple(self.values))

    def __call__(self, values: Values) -> bool:
        return not _matches(values, self.values)

    def describe(self) -> str:
        return f"forbid {_condition_text(self.values)}"


def as_constraint(rule: Constraint | Callable[[Values], bool]) -> Constraint:
    """Plain callables become rules over all dimensions."""
    if isinstance(rule, Constraint):
        return rule
    return Rule(getattr(rule, "__name__", "custom rule"), rule)
