"""Built-in grammars: families of structural prompt choices, each usable alone or combined.

A grammar contributes dimensions (named `<grammar>.<part>`), its validity rules, baseline values
and a composer that turns its parts into PromptSpec fields. Composers only write the fields
their grammar owns: the wrapper owns the passage fields, format or template the other fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from prompttune.search_spaces.constraints import Constraint
from prompttune.search_spaces.space import Composer, Dimension
from prompttune.tasks.task import Task

Casing = Literal["as_is", "title", "upper", "lower"]


def apply_casing(text: str, casing: Casing) -> str:
    """Title capitalises each word's first letter and keeps the rest (so "Sci/Tech" survives)."""
    if casing == "title":
        return " ".join(w[:1].upper() + w[1:] for w in text.split(" "))
    if casing == "upper":
        return text.upper()
    if casing == "lower":
        return text.lower()
    return text


def field_title(name: str) -> str:
    """The default descriptor of an input field: `passage_1` → `Passage 1`."""
    return name.replace("_", " ").strip().capitalize()


@dataclass(frozen=True)
class GrammarContext:
    """What a grammar needs to know about the rest of the space."""

    task: Task
    few_shot_k: tuple[int, ...] = (0,)


@dataclass
class SpacePart:
    """A grammar's contribution to a space."""

    dimensions: list[Dimension]
    constraints: list[Constraint] = field(default_factory=list)
    composer: Composer | None = None
    defaults: dict[str, Any] = field(default_factory=dict)


def preferred(values: list[Any], wanted: Any) -> Any:
    """The baseline value: `wanted` if the list has it, else the first value."""
    return wanted if wanted in values else values[0]
