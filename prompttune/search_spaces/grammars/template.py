"""Template parts from "Mind Your Format" (Voronov et al., 2024): verbalizers and separators.

An input verbalizer wraps the input (`text: {}`), an output verbalizer wraps the answer
(`It was {}.`); the intra-example separator goes between them, the inter-example separator
between demos, so it only exists when the space can have demos (and stays at its baseline
when k = 0, where it would not show).
"""

from __future__ import annotations

from typing import Any, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator

from prompttune.core.types import Example
from prompttune.search_spaces.constraints import Constraint, When
from prompttune.search_spaces.grammars import GrammarContext, SpacePart, preferred
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.search_spaces.space import Dimension

INPUTS = ("input: {}", "text: {}", "sentence: {}", "{}")
OUTPUTS = ("output: {}", "target: {}", "label: {}", "{}")
FAMILY_OUTPUTS = {
    "topic": ("Topic: {}.", "Subject: {}.", "This is about {}.", "It is about {}."),
    "sentiment": ("sentiment: {}", "It was {}.", "All in all {}.", "A {} one.", "Overall it felt {}."),
}
TASK_FAMILIES = {"agnews": "topic", "sst2": "sentiment"}
INTRA = (" ", "\n")
INTER = (" ", "\n", "\n\n")
Family = Literal["topic", "sentiment", "none"]

IN, OUT, INTRA_DIM, INTER_DIM = (f"template.{p}" for p in ("input", "output", "intra", "inter"))


class TemplateGrammar(BaseModel):
    """YAML `grammars.template`; `outputs` defaults to the generic ones plus the task family's."""

    model_config = ConfigDict(extra="forbid")
    field: str | None = Field(None, description="input field the input verbalizer wraps (default: first)")
    inputs: list[str] = Field(default_factory=lambda: list(INPUTS), min_length=1)
    outputs: list[str] | None = Field(None, min_length=1)
    family: Family | None = Field(None, description="task-specific outputs; default from the task name")
    intra: list[str] = Field(default_factory=lambda: list(INTRA), min_length=1)
    inter: list[str] = Field(default_factory=lambda: list(INTER), min_length=1)

    @field_validator("inputs", "outputs")
    @classmethod
    def _one_slot(cls, value: list[str] | None) -> list[str] | None:
        if bad := [t for t in value or [] if t.count("{}") != 1]:
            raise ValueError(f"a verbalizer needs exactly one '{{}}' for the value: {bad}")
        return value

    def part(self, context: GrammarContext) -> SpacePart:
        task = context.task
        if self.field is not None and self.field not in task.input_fields:
            raise ValueError(f"field {self.field!r} is not an input field of task {task.name!r}")
        family = self.family or TASK_FAMILIES.get(task.name, "none")
        outputs = self.outputs or list(OUTPUTS) + list(FAMILY_OUTPUTS.get(family, ()))
        dims = [Dimension(IN, tuple(self.inputs), f"part:{IN}", "template", "input verbalizer"),
                Dimension(OUT, tuple(outputs), f"part:{OUT}", "template", "output verbalizer"),
                Dimension(INTRA_DIM, tuple(self.intra), f"part:{INTRA_DIM}", "template",
                          "intra-example separator")]
        defaults: dict[str, Any] = {INTRA_DIM: preferred(self.intra, "\n")}
        rules: list[Constraint] = []
        if any(k > 0 for k in context.few_shot_k):
            dims.append(Dimension(INTER_DIM, tuple(self.inter), f"part:{INTER_DIM}", "template",
                                  "inter-example separator"))
            defaults[INTER_DIM] = preferred(self.inter, "\n\n")
            if 0 in context.few_shot_k and len(self.inter) > 1:
                rules.append(When({"few_shot.k": (0,)}, {INTER_DIM: (defaults[INTER_DIM],)}))
        return SpacePart(dims, rules, self.compose, defaults)

    def compose(self, spec: PromptSpec, parts: Mapping[str, Any], pool: Sequence[Example]) -> PromptSpec:
        target = self.field or spec.input_templates[0][0]
        templates = tuple((f, parts[IN] if f == target else t) for f, t in spec.input_templates)
        updates: dict[str, Any] = {"input_templates": templates, "output_template": parts[OUT],
                                   "intra_separator": parts[INTRA_DIM]}
        if INTER_DIM in parts:
            updates["inter_separator"] = parts[INTER_DIM]
        return spec.with_updates(**updates)
