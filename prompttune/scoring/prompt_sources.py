"""Where the prompts of `evaluate` come from: a prompts file, or N candidates sampled from a space.

A prompts file (YAML, or JSON by suffix) is either a list of templates or a mapping

    label_words: [World, Sports, Business, Technology]   # optional, or {label: word}
    prompts:
      - "Article: {text}\\nTopic:"
      - {name: topic-question, template: "{text}\\nWhat is the topic ({labels})?"}
      - {name: shipped, export: runs/agnews-sh/export/prompt.openai-chat.json}

Templates hold one `{field}` per input field of the task (`{text}` for agnews and sst2) and may
hold `{labels}` (the label words joined by ", "); `{{` and `}}` are literal braces. Rendering is
byte-exact: the prompt is the template with the fields filled in, minus trailing spaces, and each
label is scored as the continuation " " + its label word (BPE tokenizers attach the space to the
word). Label words default to the task's first verbalizer of every label.

An `export` entry is a prompt `prompttune export RUN --to openai-chat` wrote (the path is relative
to the prompts file): its messages, assistant prefix, label words and calibration are scored as
the run scored them (`exported_spec`), whatever the file's `label_words` say.
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from prompttune.core.errors import UserError
from prompttune.core.yamlio import load_yaml
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.search_spaces.space import SearchSpace
from prompttune.tasks.task import Task


@dataclass(frozen=True)
class NamedPrompt:
    """A prompt under evaluation; `source` is its template or its space assignment, for the report."""

    name: str
    spec: PromptSpec
    source: str


OPENAI_CHAT_FORMAT = "prompttune-openai-chat/1"


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    template: str | None = None
    export: str | None = None


class _Message(BaseModel):
    role: Literal["system", "user"]
    content: str


class _Answer(BaseModel):
    continuations: list[str]
    cot: bool = False


class _Calibration(BaseModel):
    bias: list[float] | None = None  # batch calibration's offsets; contextual calibration exports none


class _OpenAIChatExport(BaseModel):
    """The parts of an openai-chat export that decide how it renders and is scored."""

    format: Literal[OPENAI_CHAT_FORMAT]
    input_fields: list[str]
    chat: bool
    messages: list[_Message] = Field(min_length=1)
    assistant_prefix: str
    label_words: list[str] = Field(min_length=1)
    answer: _Answer
    calibrate: bool
    calibration: _Calibration | None = None


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


def _placeholder_templates(content: str, fields: Sequence[str]) -> tuple[list[tuple[str, str]], str]:
    """`content` cut at each `{field}`: (field, text before it + "{}") pieces, and the text after the last."""
    if "{}" in content:
        raise UserError("a literal '{}' in the exported prompt cannot be rendered as a template")
    pattern = re.compile("|".join(re.escape(f"{{{name}}}") for name in fields))
    pieces, start = [], 0
    for found in pattern.finditer(content):
        pieces.append((found.group()[1:-1], content[start:found.start()] + "{}"))
        start = found.end()
    return pieces, content[start:]


def exported_spec(data: object, task: Task) -> PromptSpec:
    """The PromptSpec that renders an openai-chat export exactly: its messages with the task's inputs
    in place of the `{field}` placeholders, its assistant prefix and label continuations, its calibration."""
    try:
        export = _OpenAIChatExport.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "top level"
        raise UserError(f"not an openai-chat export ({where}: {err['msg']})") from None
    if sorted(export.input_fields) != sorted(task.input_fields):
        raise UserError(f"exported for input fields {', '.join(export.input_fields)}, not the task's "
                        f"{', '.join(task.input_fields)}")
    if len(export.label_words) != len(task.labels):
        raise UserError(f"exported with {len(export.label_words)} label words for the task's {len(task.labels)} labels")
    if export.answer.cot:
        raise UserError("a chain-of-thought export cannot be scored again from its messages (its reasoning "
                        "trigger is part of the text, which the prompt would add a second time)")
    word, continuation = export.label_words[0], export.answer.continuations[0]
    carried = continuation[:len(continuation) - len(word)]
    if [carried + w for w in export.label_words] != export.answer.continuations:
        raise UserError("the continuations are not the label words after one shared prefix")
    *system, user = export.messages
    if user.role != "user" or [m.role for m in system] not in ([], ["system"]) or (system and not export.chat):
        raise UserError("expected an optional system message, then one user message")
    bias = tuple(export.calibration.bias) if export.calibration and export.calibration.bias else ()
    calibration = {"calibrate": export.calibrate and not bias, "label_bias": bias}
    pieces, tail = _placeholder_templates(user.content, export.input_fields)
    if not pieces:
        raise UserError(f"the user message holds no {{{export.input_fields[0]}}}")
    if export.chat:  # the user message ends with the input; the assistant prefix opens the answer
        pieces[-1] = (pieces[-1][0], pieces[-1][1] + tail)
        return PromptSpec(instruction="", input_templates=tuple(pieces), field_joiner="", chat=True,
                          system=system[0].content if system else None, label_words=tuple(export.label_words),
                          output_template=export.assistant_prefix + carried + "{}", **calibration)
    return PromptSpec(instruction="", input_templates=tuple(pieces), field_joiner="", intra_separator="",
                      output_template=tail + carried + "{}", label_words=tuple(export.label_words),
                      **calibration)


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


def _read(path: Path, what: str = "prompts file") -> object:
    if not path.is_file():
        raise UserError(f"{what} {path} not found")
    if path.suffix == ".json":
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}: cannot read JSON: {exc}") from None
    return load_yaml(path)


def load_prompts_file(path: str | Path, task: Task) -> list[NamedPrompt]:
    """Parse and validate a prompts file for `task`; any problem is a one-line UserError."""
    return parse_prompts(_read(Path(path)), task, str(path), Path(path).parent)


def parse_prompts(raw: object, task: Task, source: str = "prompts", base: Path = Path()) -> list[NamedPrompt]:
    """Templates (a list, or a mapping with 'prompts' and optional 'label_words') as named prompt
    specs for `task`; `source` names where they came from in every error, `base` is the folder
    `export` paths are relative to."""
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
        name = (entry.name if isinstance(entry, _Entry) else None) or f"p{i:02d}"
        try:
            spec, shown = _entry_spec(entry, task, words, base)
        except UserError as exc:
            raise UserError(f"{source}: prompt {name!r}: {exc}") from None
        clash = next((p for p in prompts if p.name == name or p.spec == spec), None)
        if clash is not None:
            raise UserError(f"{source}: prompt {name!r} repeats the {'name' if clash.name == name else 'template'} "
                            f"of prompt {clash.name!r}")
        prompts.append(NamedPrompt(name, spec, shown))
    return prompts


def _entry_spec(entry: str | _Entry, task: Task, words: Sequence[str], base: Path) -> tuple[PromptSpec, str]:
    """One entry's spec, and what the report shows as its source."""
    if isinstance(entry, str):
        return template_spec(entry, task.input_fields, words), entry
    if (entry.template is None) == (entry.export is None):
        raise UserError("give either template or export")
    if entry.template is not None:
        return template_spec(entry.template, task.input_fields, words), entry.template
    path = base / entry.export
    return exported_spec(_read(path, "exported prompt"), task), f"export {entry.export}"


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
