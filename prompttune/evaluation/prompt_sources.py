"""Where the prompts of `evaluate` come from: a prompts file, or N candidates sampled from a space.

A prompts file (YAML, or JSON by suffix) is either a list of templates or a mapping

    label_words: [World, Sports, Business, Technology]   # optional, or {label: word}
    prompts:
      - "Article: {text}\\nTopic:"
      - {name: topic-question, template: "{text}\\nWhat is the topic ({labels})?"}

Templates hold one `{field}` per input field of the task (`{text}` for agnews and sst2) and may
hold `{labels}` (the label words joined by ", "); `{{` and `}}` are literal braces. Rendering is
byte-exact: the prompt is the template with the fields filled in, minus trailing spaces, and each
label is scored as the continuation " " + its label word (BPE tokenizers attach the space to the
word). Label words default to the task's first verbalizer of every label.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from prompttune.core.errors import UserError
from prompttune.core.yamlio import load_yaml
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.search_spaces.space import SearchSpace
from prompttune.tasks.base import Task


@dataclass(frozen=True)
class NamedPrompt:
    """A prompt under evaluation; `source` is its template or its space assignment, for the report."""

    name: str
    spec: PromptSpec
    source: str


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    template: str


class _PromptsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: list[str | _Entry] = Field(min_length=1)
    label_words: list[str] | dict[str, str] | None = None


def template_spec(template: str, fields: Sequence[str], label_words: Sequence[str]) -> PromptSpec:
    """The PromptSpec that renders `template` exactly: field pieces as input templates, the rest as output."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise UserError(f"malformed template ({exc}; write {{{{ and }}}} for literal braces)") from None
    segments: list[tuple[str, str]] = []
    literal = ""
    for text, name, format_spec, conversion in parsed:
        literal += text
        if "{}" in literal:
            raise UserError("a literal '{}' is not supported in templates")
        if name is None:
            continue
        if format_spec or conversion:
            raise UserError(f"placeholder {{{name}}} takes no format spec or conversion")
        if name == "labels":
            literal += ", ".join(label_words)
        elif name in fields:
            segments.append((name, literal + "{}"))
            literal = ""
        else:
            raise UserError(f"unknown placeholder {{{name}}}; use "
                            + ", ".join(f"{{{f}}}" for f in [*fields, "labels"]))
    missing = [f for f in fields if f not in {name for name, _ in segments}]
    if missing:
        raise UserError(f"template lacks {{{missing[0]}}}")
    return PromptSpec(instruction="", input_templates=tuple(segments), field_joiner="", intra_separator="",
                      output_template=literal.rstrip(" ") + " {}", label_words=tuple(label_words))


def _label_words(raw: list[str] | dict[str, str] | None, task: Task) -> list[str]:
    if raw is None:
        words = [v[0] for v in task.verbalizers]
    elif isinstance(raw, dict):
        if set(raw) != set(task.labels):
            raise UserError(f"label_words must map exactly the labels {', '.join(task.labels)}")
        words = [raw[label] for label in task.labels]
    else:
        if len(raw) != len(task.labels):
            raise UserError(f"label_words has {len(raw)} words for {len(task.labels)} labels "
                            f"({', '.join(task.labels)})")
        words = list(raw)
    if any(not w or w != w.strip() for w in words):
        raise UserError("label words must be non-empty and carry no surrounding spaces")
    if len(set(words)) != len(words):
        raise UserError(f"label words must be distinct, got {', '.join(words)}")
    return words


def _read(path: Path) -> object:
    if not path.is_file():
        raise UserError(f"prompts file {path} not found")
    if path.suffix == ".json":
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}: cannot read JSON: {exc}") from None
    return load_yaml(path)


def load_prompts_file(path: str | Path, task: Task) -> list[NamedPrompt]:
    """Parse and validate a prompts file for `task`; any problem is a one-line UserError."""
    return parse_prompts(_read(Path(path)), task, str(path))


def parse_prompts(raw: object, task: Task, source: str = "prompts") -> list[NamedPrompt]:
    """Templates (a list, or a mapping with 'prompts' and optional 'label_words') as named prompt
    specs for `task`; `source` names where they came from in every error."""
    try:
        parsed = _PromptsFile.model_validate({"prompts": raw} if isinstance(raw, list) else raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "top level"
        raise UserError(f"{source}: {where}: {err['msg']} (expected a list of templates or a mapping "
                        f"with 'prompts' and optional 'label_words')") from None
    try:
        words = _label_words(parsed.label_words, task)
    except UserError as exc:
        raise UserError(f"{source}: {exc}") from None
    prompts: list[NamedPrompt] = []
    for i, entry in enumerate(parsed.prompts, start=1):
        name, template = (f"p{i:02d}", entry) if isinstance(entry, str) else (entry.name or f"p{i:02d}",
                                                                             entry.template)
        try:
            spec = template_spec(template, task.input_fields, words)
        except UserError as exc:
            raise UserError(f"{source}: prompt {name!r}: {exc}") from None
        clash = next((p for p in prompts if p.name == name or p.spec == spec), None)
        if clash is not None:
            raise UserError(f"{source}: prompt {name!r} repeats the {'name' if clash.name == name else 'template'} "
                            f"of prompt {clash.name!r}")
        prompts.append(NamedPrompt(name, spec, template))
    return prompts


def sample_space(space: SearchSpace, n: int, seed: int) -> list[NamedPrompt]:
    """N distinct prompts drawn uniformly from the valid candidates of `space`."""
    size = space.size()
    largest = size.value if size.exact else (size.high or size.value)
    if n > largest:
        raise UserError(f"--sample {n} is larger than the space {space.name!r} ({size} valid candidates)")
    chosen: dict[PromptSpec, NamedPrompt] = {}
    for candidate in space.distinct_candidates(np.random.default_rng(seed), n):
        source = ", ".join(f"{name}={space.dimension(name).label(i)}" for name, i in candidate.assignment)
        chosen.setdefault(candidate.spec, NamedPrompt(candidate.id, candidate.spec, source))
    if len(chosen) < n:
        raise UserError(f"found only {len(chosen)} distinct prompts in {50 * n} draws from space "
                        f"{space.name!r}; lower --sample")
    return list(chosen.values())
