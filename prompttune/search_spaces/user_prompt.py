"""The user's own prompt as a PromptSpec whose rendering is the user's text, byte for byte.

The layout read from a template (its surrounding whitespace dropped: the label is scored right after its end):

    Classify the review.        the text before the first line with a {field}: the instruction ("before"),
                                the blank lines after it the instruction separator
    Review: {review}            the lines with the fields: input templates ("Review: {}"), joined by the
                                whitespace between them
    Is it {labels}?             text between the input lines and the last line: the instruction ("after") when
                                nothing precedes the input lines, else it stays with the last input line
    Sentiment:                  the text after the last field, last line: the answer cue ("Sentiment: {}"),
                                the whitespace before it the intra separator

Input lines off that layout (two fields on one line, text between input lines) are kept verbatim as the pieces
between the fields, so every template renders exactly; the derived space varies only the parts that fit the
layout (`builtin.user_prompt_space`). `{labels}` elsewhere than in the instruction is written out, and the
label words then stay fixed. A template that ends with its last field gets the cue "Answer:" (label scoring needs
one), and says so. In a chat prompt the user message stays whole (the assistant turn is the cue).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Sequence

from prompttune.core.errors import UserError
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.tasks.user_prompt import UserPrompt

_FIELD, _LABELS = "\x00", "\x01"  # stand for a field's value and for {labels} while the layout is read
ADDED_CUE = "Answer: {}"


@dataclass(frozen=True)
class ParsedPrompt:
    """The spec that renders the user's prompt, what a reader should know about how it was read, and whether
    its label words must stay (the prompt writes them out where the renderer would not change them)."""

    spec: PromptSpec
    notes: tuple[str, ...]
    fixed_label_words: bool = False


def _marked(template: str, fields: Sequence[str], where: str) -> tuple[str, list[str]]:
    """The template with every `{field}` replaced by a mark (`{{`/`}}` unescaped, `{labels}` kept), and the
    fields in the order they appear; every input field exactly once."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise UserError(f"{where}: malformed template ({exc}; write {{{{ and }}}} for literal braces)") from None
    text, order = [], []
    for literal, name, format_spec, conversion in parsed:
        text.append(literal)
        if name is None:
            continue
        if format_spec or conversion:
            raise UserError(f"{where}: placeholder {{{name}}} takes no format spec or conversion")
        if name == "labels":
            text.append(_LABELS)
        elif name not in fields:
            raise UserError(f"{where}: unknown placeholder {{{name}}}; use "
                            + ", ".join(f"{{{f}}}" for f in [*fields, "labels"]))
        elif name in order:
            raise UserError(f"{where}: {{{name}}} appears twice; the prompt shows each input field once")
        else:
            order.append(name)
            text.append(_FIELD)
    if missing := [f for f in fields if f not in order]:
        raise UserError(f"{where}: the prompt lacks {{{missing[0]}}} (every input field appears once)")
    marked = "".join(text)
    if "{}" in marked or "{labels}" in marked:  # the renderer would fill them
        raise UserError(f"{where}: a literal '{{}}' or '{{labels}}' is not supported in the prompt")
    return marked.replace(_LABELS, "{labels}"), order


def _system(system: str, where: str) -> str:
    """The system message as written (`{{`/`}}` unescaped); it is shown verbatim, so it takes no placeholder."""
    parsed = list(string.Formatter().parse(system))
    if any(name is not None for _, name, _, _ in parsed):
        raise UserError(f"{where}: the system message takes no placeholders (put the input fields and {{labels}} "
                        f"in the user message)")
    return "".join(literal for literal, _, _, _ in parsed)


def _input_templates(body: str, order: list[str]) -> tuple[tuple[tuple[str, str], ...], str]:
    """Input templates and field joiner of the input lines: one line per field joined by the same blank lines,
    else the verbatim pieces between the fields (joiner "")."""
    lines = body.split("\n")
    rows = [i for i, line in enumerate(lines) if _FIELD in line]
    gaps = ["\n" + "".join(line + "\n" for line in lines[a + 1:b]) for a, b in zip(rows, rows[1:])]
    if all(lines[i].count(_FIELD) == 1 for i in rows) and not "".join(gaps).strip() and len(set(gaps)) <= 1:
        return tuple((f, lines[i].replace(_FIELD, "{}")) for f, i in zip(order, rows)), (gaps or ["\n"])[0]
    pieces = body.split(_FIELD)
    templates = [(f, piece + "{}") for f, piece in zip(order, pieces)]
    templates[-1] = (order[-1], templates[-1][1] + pieces[-1])
    return tuple(templates), ""


def _around(text: str, middle: str) -> tuple[str, str]:
    """The whitespace before and after `middle` in `text` (`middle` is `text` stripped)."""
    start = text.index(middle)
    return text[:start], text[start + len(middle):]


def parse_user_prompt(prompt: UserPrompt, fields: Sequence[str], label_words: Sequence[str]) -> ParsedPrompt:
    """The PromptSpec that renders `prompt` exactly (label words `label_words`); a template it cannot read
    is a one-line UserError naming its source."""
    where = prompt.source
    text, order = _marked(prompt.template.strip(), fields, where)
    last = text.rindex(_FIELD) + 1
    start = text.rfind("\n", 0, text.index(_FIELD)) + 1
    head, after = text[:start], text[last:]
    notes = [f"The baseline is your prompt ({where}), rendered as written (surrounding whitespace dropped)."]
    if prompt.chat or "\n" in after:  # the rest of the last input line stays with it
        suffix = after.split("\n", 1)[0]
        after = after[len(suffix):]
    else:  # the text after the last field, on its line, is the cue
        suffix = ""
    cue = "" if prompt.chat else after.rsplit("\n", 1)[-1]
    between = after[:len(after) - len(cue)]
    middle = between.strip()
    templates, joiner = _input_templates(text[start:last] + suffix, order)
    instruction = head.rstrip()
    position, separator = "before", head[len(instruction):] or "\n"
    if middle and not instruction:
        instruction, position = middle, "after"
        separator, intra = _around(between, middle)
    elif middle:
        lead, intra = _around(between, middle)
        templates = (*templates[:-1], (templates[-1][0], templates[-1][1] + lead + middle))
        notes.append("The text after the input lines stays with the last one (the instruction is the text before "
                     "them), so demos repeat it.")
    else:
        intra = between
    if prompt.chat:
        output, intra = "{}", "\n"  # the assistant turn answers; the separator only parts a demo from its label
    elif cue:
        output = cue.strip() + " {}"
        intra += cue[:len(cue) - len(cue.lstrip())]
    else:
        output, intra = ADDED_CUE, "\n"
        notes.append(f"Your prompt ends with its input, so the answer cue {ADDED_CUE.split('{}')[0].strip()!r} "
                     f"follows it on a new line: label scoring needs a cue.")
    listed = ", ".join(label_words)
    fixed_words = any("{labels}" in t for _, t in templates) or "{labels}" in output
    if fixed_words:  # the renderer fills {labels} in the instruction only: elsewhere the words are written out
        templates = tuple((f, t.replace("{labels}", listed)) for f, t in templates)
        output = output.replace("{labels}", listed)
        notes.append("Your prompt lists the labels outside its instruction, so the label words stay as they are.")
    spec = PromptSpec(instruction=instruction, instruction_position=position, instruction_separator=separator,
                      input_templates=templates, field_joiner=joiner, output_template=output,
                      intra_separator=intra, label_words=tuple(label_words), chat=prompt.chat,
                      system=_system(prompt.system, where) if prompt.system is not None else None)
    return ParsedPrompt(spec, tuple(notes), fixed_words)
