"""The search-space file schema (YAML or the same structure built in Python), checked by pydantic.

Unknown keys are errors, so a typo never silently drops a dimension. Everything that needs the
task (label names, input fields, dimension names in rules) is checked when the space is built.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from prompttune.search_spaces.grammars.format import FormatGrammar
from prompttune.search_spaces.grammars.template import TemplateGrammar
from prompttune.search_spaces.grammars.wrapper import WrapperGrammar
from prompttune.search_spaces.prompt import PromptSpec


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# PromptSpec fields that `base:` does not set: the task gives the label words, the searched few-shot
# dimension the demos, the wrapper grammar the passages and the format grammar the option list.
NOT_IN_BASE = frozenset({"label_words", "demo_ids", "passage_templates", "passage_separator", "options"})


def _base_fields() -> dict[str, Any]:
    """`base:`'s keys, types and defaults, read from the PromptSpec dataclass (declared once, there);
    only `input_templates` is written differently in a file: a mapping of input field to template."""
    types = get_type_hints(PromptSpec)
    declared = {f.name: (types[f.name], f.default) for f in fields(PromptSpec) if f.name not in NOT_IN_BASE}
    declared["input_templates"] = (dict[str, str], Field(default_factory=dict,
                                                         description="input field -> template with '{}'"))
    return declared


BaseSettings = create_model("BaseSettings", __base__=_Strict, __module__=__name__, **_base_fields())
BaseSettings.__doc__ = "Fixed PromptSpec settings (not searched); grammars and dimensions override them."


class SynonymSettings(_Strict):
    source: str = "wordnet"
    limit: int = Field(3, ge=1)
    pos: Literal["n", "v", "a", "r"] | None = Field(None, description="WordNet part of speech")


class Slot(_Strict):
    """`{name}` in the instructions: the word as written plus its alternatives."""

    word: str | None = Field(None, description="the word as written (default: the slot name)")
    values: list[str] = Field(default_factory=list, description="alternatives")
    synonyms: SynonymSettings | None = None

    @model_validator(mode="before")
    @classmethod
    def _list_means_values(cls, data: Any) -> Any:
        return {"values": data} if isinstance(data, list) else data


class Choice(_Strict):
    target: str | None = Field(None, description="PromptSpec field or input:FIELD (default: the name)")
    values: list[Any] = Field(min_length=1)


class FewShotSettings(_Strict):
    k: list[int] = Field(default_factory=lambda: [0], min_length=1)
    selection: list[str] = Field(default_factory=lambda: ["random"], min_length=1)
    order: list[int] = Field(default_factory=lambda: [0], min_length=1)
    draw_seed: int = 0

    @model_validator(mode="after")
    def _non_negative(self) -> "FewShotSettings":
        if any(k < 0 for k in self.k):
            raise ValueError("k must be 0 or more")
        return self


class Toggles(_Strict):
    """Each `true` searches off/on; `system` searches no system prompt vs the given text(s)."""

    cot: bool = False
    chat: bool = False
    system: str | list[str] | None = None


class Grammars(_Strict):
    format: FormatGrammar | None = None
    template: TemplateGrammar | None = None
    wrapper: WrapperGrammar | None = None

    @model_validator(mode="after")
    def _one_field_grammar(self) -> "Grammars":
        if self.format is not None and self.template is not None:
            raise ValueError("format and template both write the field templates: use one of them")
        return self


class RuleSettings(_Strict):
    """`when` + `then` (if all `when` hold, all `then` must), or `forbid` (this combination is invalid).

    Each condition maps a dimension name to a value or a list of allowed values.
    """

    when: dict[str, Any] | None = None
    then: dict[str, Any] | None = None
    forbid: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_shape(self) -> "RuleSettings":
        if self.forbid is not None and (self.when is not None or self.then is not None):
            raise ValueError("use either forbid, or when + then")
        if self.forbid is None and not self.then:
            raise ValueError("a rule needs `then` (with optional `when`) or `forbid`")
        if self.forbid is not None and not self.forbid:
            raise ValueError("forbid needs at least one dimension")
        return self


class SpaceFile(_Strict):
    """A whole search space; the first value of every list is the baseline unless `default` says."""

    name: str
    task: str | None = Field(None, description="name of the task the space was written for")
    base: BaseSettings = Field(default_factory=BaseSettings)
    instructions: list[str] = Field(default_factory=list, description='"" is the minimal prompt')
    slots: dict[str, Slot] = Field(default_factory=dict)
    label_words: dict[str, list[str]] | Literal["task"] | None = None
    choices: dict[str, Choice] = Field(default_factory=dict)
    grammars: Grammars = Field(default_factory=Grammars)
    few_shot: FewShotSettings | None = None
    toggles: Toggles = Field(default_factory=Toggles)
    constraints: list[RuleSettings] = Field(default_factory=list)
    default: dict[str, Any] = Field(default_factory=dict, description="dimension -> baseline value")
