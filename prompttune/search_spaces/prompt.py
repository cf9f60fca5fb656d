"""A concrete prompt design (PromptSpec) and its byte-exact rendering.

Every search space builds PromptSpecs; every backend consumes the `Prompt` rendered from one.
Demos are rendered by exactly the same code path as the live query, so few-shot examples always
share the live format.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Literal, Mapping, Sequence

from prompttune.core.types import Example, Prompt


@dataclass(frozen=True)
class PromptSpec:
    """All choices that turn (example, demos) into prompt text.

    Templates use `{}` for the value; `instruction` may contain `{labels}` (the label words).
    Passages (retrieval-context fields) come first, joined by `passage_separator`; `options` is a
    pre-rendered option list shown with every example, so demos and query share it.
    `calibrate` changes no text: it divides the label probabilities by the prompt's own bias on
    content-free inputs (`prompttune.scoring.prediction`), a part of the prompt that ships with it.
    `label_bias` changes no text either: batch calibration's offsets, subtracted from the label
    log-probabilities (normalised over the labels), estimated once from unlabelled inputs and fixed.
    """

    instruction: str = ""
    instruction_position: Literal["before", "after"] = "before"
    instruction_separator: str = "\n"
    input_templates: tuple[tuple[str, str], ...] = (("text", "Input: {}"),)
    field_joiner: str = "\n"
    output_template: str = "Answer: {}"
    intra_separator: str = "\n"
    inter_separator: str = "\n\n"
    label_words: tuple[str, ...] = ()
    demo_ids: tuple[str, ...] = ()
    chat: bool = False
    system: str | None = None
    cot: bool = False
    passage_templates: tuple[tuple[str, str], ...] = ()
    passage_separator: str = "\n"
    options: str = ""
    calibrate: bool = False  # contextual calibration of the label scores (needs label log-probabilities)
    label_bias: tuple[float, ...] = ()  # batch calibration's per-label offsets (needs label log-probabilities)

    @property
    def output_prefix(self) -> str:
        return self.output_template.split("{}", 1)[0]

    def with_updates(self, **changes: object) -> "PromptSpec":
        return replace(self, **changes)

    def hashed_fields(self) -> dict[str, object]:
        """The fields that ids and hashes are made of: `asdict` without `calibrate` and `label_bias` at
        their defaults, so a spec hashes as it did before those fields existed."""
        data = asdict(self)
        for name in ("calibrate", "label_bias"):
            if not data[name]:
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> "PromptSpec":
        """A spec from its JSON form (`asdict`; lists back to tuples, keys it does not know ignored)."""
        def tuples(value: object) -> object:
            return tuple(tuples(v) for v in value) if isinstance(value, list) else value
        known = {f.name for f in fields(cls)}
        return cls(**{key: tuples(value) for key, value in data.items() if key in known})


COT_TRIGGER = "Let's think step by step, then give the final answer after 'Final answer:'."


def _fill(templates: tuple[tuple[str, str], ...], example: Example) -> list[str]:
    return [template.replace("{}", example.fields[name]) for name, template in templates]


def _render_input(spec: PromptSpec, example: Example) -> str:
    """Passages block, then the input fields and the option list, in the live format."""
    fields = _fill(spec.input_templates, example) + ([spec.options] if spec.options else [])
    body = spec.field_joiner.join(fields)
    if not spec.passage_templates:
        return body
    passages = spec.passage_separator.join(_fill(spec.passage_templates, example))
    return passages + spec.passage_separator + body if body else passages


def _labels_text(spec: PromptSpec) -> str:
    return ", ".join(spec.label_words)


def _split_trailing_space(text: str) -> tuple[str, str]:
    """BPE tokenizers attach a leading space to the next word, so move trailing spaces there."""
    stripped = text.rstrip(" ")
    return stripped, text[len(stripped):]


def render(spec: PromptSpec, example: Example, demos: Sequence[Example]) -> Prompt:
    """Render the query `example` with `demos` (labels shown) in the spec's format."""
    return render_many(spec, [example], demos)[0]


def render_many(spec: PromptSpec, examples: Sequence[Example], demos: Sequence[Example]) -> list[Prompt]:
    """`render` of each of `examples`: what the spec and its demos fix is built once (a search renders
    tens of thousands of prompts)."""
    instruction = spec.instruction.replace("{labels}", _labels_text(spec))
    if spec.cot and instruction:
        instruction = f"{instruction} {COT_TRIGGER}"
    elif spec.cot:
        instruction = COT_TRIGGER
    shots = [_render_input(spec, d) + spec.intra_separator + spec.output_template.replace(
        "{}", spec.label_words[d.label]) for d in demos]
    prefix, carried_space = _split_trailing_space(spec.output_prefix)
    continuations = tuple(carried_space + word for word in spec.label_words)
    return [_render_query(spec, instruction, shots, prefix, continuations, _render_input(spec, example))
            for example in examples]


def _render_query(spec: PromptSpec, instruction: str, shots: list[str], prefix: str,
                  continuations: tuple[str, ...], query_input: str) -> Prompt:
    body = spec.inter_separator.join(shots + [query_input])
    if instruction and spec.instruction_position == "before":
        user = instruction + spec.instruction_separator + body
    elif instruction:
        user = body + spec.instruction_separator + instruction
    else:
        user = body
    if spec.chat:
        messages = ((("system", spec.system),) if spec.system else ()) + (("user", user),)
        return Prompt(messages=messages, assistant_prefix=prefix, label_continuations=continuations)
    text = user + spec.intra_separator + prefix
    text, more_space = _split_trailing_space(text)
    if more_space:
        continuations = tuple(more_space + c for c in continuations)
    if spec.system:
        text = spec.system + "\n\n" + text
    return Prompt(text=text, label_continuations=continuations)


def fixed_part(spec: PromptSpec, demos: Sequence[Example]) -> Prompt:
    """The prompt rendered around empty inputs: instruction, demos, field names, options and cue, the part every
    request of this prompt carries whatever its input (what frozen texts and --max-prompt-tokens are checked on)."""
    names = {name for name, _ in spec.input_templates + spec.passage_templates}
    return render(spec, Example("", dict.fromkeys(names, ""), -1), demos)


def select_demos(spec: PromptSpec, pool: Mapping[str, Example]) -> list[Example]:
    return [pool[i] for i in spec.demo_ids]
