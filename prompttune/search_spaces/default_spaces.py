"""The spaces prompttune builds itself: around the user's own prompt when the task carries one, else a small
default space for any classification task (instructions × formats × label words)."""

from __future__ import annotations

import re
from typing import Callable

from prompttune.search_spaces.frozen import keep_frozen
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.search_spaces.space import Dimension, SearchSpace
from prompttune.search_spaces.user_prompt import parse_user_prompt
from prompttune.tasks.task import Task
from prompttune.tasks.user_prompt import UserPrompt

_FIELD_NAMES = {"agnews": ["Article", "Text", "News", "Input"],
                "sst2": ["Review", "Sentence", "Text", "Input"],
                "trec": ["Question", "Text", "Query", "Input"]}
_OUTPUT_NAMES = {"agnews": ["Topic", "Answer", "Category"],
                 "sst2": ["Sentiment", "Answer", "Label"],
                 "trec": ["Type", "Answer type", "Category"]}
_INSTRUCTIONS = {
    "agnews": ["Classify the topic of the news article as one of: {labels}.",
               "What is this news article about? Answer with one of: {labels}.",
               "Read the article and choose its category ({labels})."],
    "sst2": ["Classify the sentiment of the review as one of: {labels}.",
             "Is this movie review {labels}?",
             "Read the review and say whether its sentiment is {labels}."],
    "trec": ["Classify the type of answer the question asks for as one of: {labels}.",
             "What kind of answer does this question expect? Answer with one of: {labels}.",
             "Read the question and choose the type of its answer ({labels})."],
}
_GENERIC_INSTRUCTIONS = ["Classify the input as one of: {labels}.",
                         "Choose the correct label for the input ({labels})."]
_NAMED = re.compile(r"(?P<name>[^\W\d][\w /-]*?)(?P<separator>[ \t]*:[ \t]*)\{\}")
"""A `Name: {}` template, the only layout whose name a space may change without touching anything else."""
_USER_PROMPT_DEMOS = 4  # few-shot k ∈ {0, 2, 4} around the user's prompt
Rename = Callable[[str], str]


def label_word_sets(task: Task, max_sets: int = 3) -> list[tuple[str, ...]]:
    """The i-th verbalizer of every label, for i up to the shortest list (distinct sets only)."""
    depth = min(max_sets, min(len(v) for v in task.verbalizers))
    return _distinct_sets([tuple(v[i] for v in task.verbalizers) for i in range(depth)])


def _distinct_sets(sets: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """Each set once, and only sets whose words tell every label apart."""
    return [s for i, s in enumerate(sets) if len(set(s)) == len(s) and s not in sets[:i]]


def default_space(task: Task) -> SearchSpace:
    """Baseline = index 0 of every dimension: the user's prompt when the task carries one, else the task's
    default prompt (a custom task's `description` as its instruction)."""
    if task.prompt is not None:
        return user_prompt_space(task, task.prompt)
    field_names = _FIELD_NAMES.get(task.name, ["Input", "Text"])
    output_names = _OUTPUT_NAMES.get(task.name, ["Answer", "Label"])
    own = _INSTRUCTIONS.get(task.name) or ([task.description] if task.description else [])
    instructions = list(dict.fromkeys([*own, *_GENERIC_INSTRUCTIONS, ""]))

    def input_templates(name: str) -> tuple[tuple[str, str], ...]:
        if len(task.input_fields) == 1:
            return ((task.input_fields[0], f"{name}: {{}}"),)
        return tuple((f, f"{f.replace('_', ' ').title()}: {{}}") for f in task.input_fields)

    dims = [
        Dimension("instruction", tuple(instructions), "instruction", kind="instruction"),
        Dimension("input_name", tuple(dict.fromkeys(input_templates(n) for n in field_names)),
                  "input_templates"),
        Dimension("output_name", tuple(f"{n}: {{}}" for n in output_names), "output_template"),
        Dimension("intra_separator", ("\n", " "), "intra_separator"),
        Dimension("label_words", tuple(label_word_sets(task)), "label_words", kind="label_words"),
    ]
    return SearchSpace(f"{task.name}-default", PromptSpec(), dims)


def _names_dimension(name: str, target: str, templates: list[str], renames: list[Rename],
                     build: Callable[[list[str]], object]) -> list[Dimension]:
    """Name alternatives of `Name: {}` templates (the user's first), where every one has that layout."""
    named = [m for m in map(_NAMED.fullmatch, templates) if m is not None]
    if len(named) < len(templates):
        return []
    values = tuple(dict.fromkeys(build([rename(m["name"]) + m["separator"] + "{}" for m in named])
                                 for rename in renames))
    return [Dimension(name, values, target)] if len(values) > 1 else []


def _keep(name: str) -> str:
    return name


def _other(name: str) -> Rename:
    return lambda _: name


def user_prompt_space(task: Task, prompt: UserPrompt) -> SearchSpace:
    """The space derived around the user's prompt: its instruction and two generic ones, name, separator and
    casing alternatives only where the prompt has the `Name: {}` layout, label-word variants (unless the prompt
    writes its labels out), few-shot k ∈ {0, 2, 4} from train, and the chat template on or off for a chat
    prompt. Its baseline renders exactly the user's prompt; its frozen texts are frozen in the space, and the generic
    instructions carry those of the user's instruction."""
    first_words = tuple(v[0] for v in task.verbalizers)
    parsed = parse_user_prompt(prompt, task.input_fields, first_words)
    base = parsed.spec
    fields = [f for f, _ in base.input_templates]
    casings: list[Rename] = [str.upper, str.lower]
    input_renames = [_keep, *([_other("Text"), _other("Input")] if len(fields) == 1 else []), *casings]
    generic = [keep_frozen(text, base.instruction, prompt.frozen) for text in _GENERIC_INSTRUCTIONS]
    dims = [
        Dimension("instruction", tuple(dict.fromkeys([base.instruction, *generic])), "instruction", kind="instruction"),
        *_names_dimension("input_name", "input_templates", [t for _, t in base.input_templates], input_renames,
                          lambda templates: tuple(zip(fields, templates))),
    ]
    output = _names_dimension("output_name", "output_template", [base.output_template],
                              [_keep, _other("Answer"), _other("Label"), *casings], lambda templates: templates[0])
    if output:
        dims += [*output, Dimension("intra_separator", tuple(dict.fromkeys([base.intra_separator, "\n", " "])),
                                    "intra_separator")]
    if not parsed.fixed_label_words:
        words = _distinct_sets([first_words, *label_word_sets(task), tuple(w.lower() for w in first_words),
                                tuple(w[:1].upper() + w[1:] for w in first_words), tuple(task.labels)])
        dims.append(Dimension("label_words", tuple(words), "label_words", kind="label_words"))
    if base.chat:
        dims.append(Dimension("chat", (True, False), "chat"))
    space = SearchSpace(f"{task.name}-your-prompt", base, dims, notes=parsed.notes)
    return space.with_demos(_USER_PROMPT_DEMOS).freezing(prompt.frozen, prompt.source)
