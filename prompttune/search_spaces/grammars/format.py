"""FormatSpread's format grammar (Sclar et al., 2024): descriptors, separator, space, casing, options.

Every field renders as `casing(descriptor) + separator + value`; fields (inputs, the option list,
the output) are joined by the space. One separator and one casing are shared by all fields of a
prompt. With an enumerator, each example also lists the label words as options, e.g.
"Options: (A) World (B) Sports"; the model is still scored on the label word itself (the
continuation after the output descriptor), so the option list is a hint, not a new answer format.

Validity rules (documented cases in the tests):
- no empty field separator: "Article" + "" + "text" glues the descriptor to the value;
- a newline in the separator needs a newline in the space, or the layout is half vertical;
- no empty space: it glues one field's value to the next field's descriptor;
- without an option list the wrapper is irrelevant and stays at its baseline (no duplicates).
"""

from __future__ import annotations

from typing import Any, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator

from prompttune.core.types import Example
from prompttune.search_spaces.constraints import Rule, When
from prompttune.search_spaces.grammars import Casing, GrammarContext, SpacePart, apply_casing, field_title, preferred
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.search_spaces.space import Dimension

FIELD_SEPARATORS = ("", "::: ", ":: ", ": ", " \n\t", "\n    ", " : ", " - ", " ", "\n ", "\n\t",
                    ":", "::", "- ", "\t")
SPACES = ("", " ", "\n", " \n", " -- ", "  ", "; \n", " || ", " <sep> ", ", ", " \n ", " , ", "\n ",
          ". ", " ,  ")
CASINGS: tuple[Casing, ...] = ("as_is", "title", "upper", "lower")
Enumerator = Literal["none", "1", "A", "a", "i", "I"]
ENUMERATORS: tuple[Enumerator, ...] = ("none", "1", "A", "a", "i", "I")
WRAPPERS = ("(x)", "x.", "x)", "[x]", "<x>")

SEP, SPACE, CASE, ENUM, WRAP, OUTPUT = (f"format.{p}" for p in
                                        ("separator", "space", "casing", "enumerator", "wrapper", "output"))


def _roman(n: int) -> str:
    numerals = [(10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
    out = ""
    for value, letters in numerals:
        while n >= value:
            out, n = out + letters, n - value
    return out


def enumerate_token(enumerator: Enumerator, i: int) -> str:
    """The i-th (0-based) marker of an enumerator: 1 / A / a / i / I style."""
    return {"1": str(i + 1), "A": chr(65 + i), "a": chr(97 + i), "i": _roman(i + 1).lower(),
            "I": _roman(i + 1)}[enumerator]


class FormatGrammar(BaseModel):
    """YAML `grammars.format`; every list defaults to the full grammar of the paper."""

    model_config = ConfigDict(extra="forbid")
    fields: dict[str, list[str]] = Field(default_factory=dict,
                                         description="input field -> descriptor choices")
    output: list[str] = Field(default_factory=lambda: ["Answer"], min_length=1)
    separators: list[str] = Field(default_factory=lambda: list(FIELD_SEPARATORS), min_length=1)
    spaces: list[str] = Field(default_factory=lambda: list(SPACES), min_length=1)
    casings: list[Casing] = Field(default_factory=lambda: list(CASINGS), min_length=1)
    enumerators: list[Enumerator] = Field(default_factory=lambda: list(ENUMERATORS), min_length=1)
    wrappers: list[str] = Field(default_factory=lambda: list(WRAPPERS), min_length=1)
    options_name: str = "Options"

    @field_validator("wrappers")
    @classmethod
    def _wrappers_mark_the_token(cls, value: list[str]) -> list[str]:
        if bad := [w for w in value if w.count("x") != 1]:
            raise ValueError(f"a wrapper needs exactly one 'x' where the marker goes: {bad}")
        return value

    @field_validator("fields")
    @classmethod
    def _descriptors_given(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        if empty := [f for f, names in value.items() if not names]:
            raise ValueError(f"no descriptor given for {empty}")
        return value

    def part(self, context: GrammarContext) -> SpacePart:
        fields = [f for f in self.fields if f not in context.task.input_fields]
        if fields:
            raise ValueError(f"fields {fields} are not input fields of task {context.task.name!r}")
        dims = [Dimension(f"format.name.{f}", tuple(names), f"part:format.name.{f}", "format",
                          f"{f} descriptor") for f, names in self.fields.items()]
        dims += [Dimension(OUTPUT, tuple(self.output), f"part:{OUTPUT}", "format", "output descriptor"),
                 Dimension(SEP, tuple(self.separators), f"part:{SEP}", "format", "separator"),
                 Dimension(SPACE, tuple(self.spaces), f"part:{SPACE}", "format", "space"),
                 Dimension(CASE, tuple(self.casings), f"part:{CASE}", "format", "casing"),
                 Dimension(ENUM, tuple(self.enumerators), f"part:{ENUM}", "format", "enumerator"),
                 Dimension(WRAP, tuple(self.wrappers), f"part:{WRAP}", "format", "option wrapper")]
        defaults = {SEP: preferred(self.separators, ": "), SPACE: preferred(self.spaces, "\n"),
                    CASE: self.casings[0], ENUM: self.enumerators[0], WRAP: self.wrappers[0]}
        rules = [
            Rule("no empty field separator", lambda v: v[SEP] != "", (SEP,)),
            Rule("a newline in the separator needs one in the space",
                 lambda v: "\n" not in v[SEP] or "\n" in v[SPACE], (SEP, SPACE)),
            Rule("no empty space between fields", lambda v: v[SPACE] != "", (SPACE,)),
        ]
        if "none" in self.enumerators and len(self.wrappers) > 1:
            rules.append(When({ENUM: ("none",)}, {WRAP: (defaults[WRAP],)}))
        return SpacePart(dims, rules, self.compose, defaults)

    def compose(self, spec: PromptSpec, parts: Mapping[str, Any], pool: Sequence[Example]) -> PromptSpec:
        """Descriptor + separator for every input field and the output; options from the label words."""
        casing, sep, space = parts[CASE], parts[SEP], parts[SPACE]

        def named(descriptor: str) -> str:
            return apply_casing(descriptor, casing) + sep + "{}"

        templates = tuple((f, named(parts.get(f"format.name.{f}", field_title(f))))
                          for f, _ in spec.input_templates)
        options = ""
        if parts[ENUM] != "none":
            items = [parts[WRAP].replace("x", enumerate_token(parts[ENUM], i)) + " " + word
                     for i, word in enumerate(spec.label_words)]
            options = apply_casing(self.options_name, casing) + sep + space.join(items)
        return spec.with_updates(input_templates=templates, field_joiner=space, intra_separator=space,
                                 output_template=named(parts[OUTPUT]), options=options)
