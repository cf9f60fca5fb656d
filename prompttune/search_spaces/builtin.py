"""The small default space for any classification task: instructions × formats × label words."""

from __future__ import annotations

from prompttune.search_spaces.prompt import PromptSpec
from prompttune.search_spaces.space import Dimension, SearchSpace
from prompttune.tasks.base import Task

_FIELD_NAMES = {"agnews": ["Article", "Text", "News", "Input"],
                "sst2": ["Review", "Sentence", "Text", "Input"]}
_OUTPUT_NAMES = {"agnews": ["Topic", "Answer", "Category"],
                 "sst2": ["Sentiment", "Answer", "Label"]}
_INSTRUCTIONS = {
    "agnews": ["Classify the topic of the news article as one of: {labels}.",
               "What is this news article about? Answer with one of: {labels}.",
               "Read the article and choose its category ({labels})."],
    "sst2": ["Classify the sentiment of the review as one of: {labels}.",
             "Is this movie review {labels}?",
             "Read the review and say whether its sentiment is {labels}."],
}
_GENERIC_INSTRUCTIONS = ["Classify the input as one of: {labels}.",
                         "Choose the correct label for the input ({labels})."]


def label_word_sets(task: Task, max_sets: int = 3) -> list[tuple[str, ...]]:
    """The i-th verbalizer of every label, for i up to the shortest list (distinct sets only)."""
    depth = min(max_sets, min(len(v) for v in task.verbalizers))
    sets = [tuple(v[i] for v in task.verbalizers) for i in range(depth)]
    return [s for i, s in enumerate(sets) if len(set(s)) == len(s) and s not in sets[:i]]


def default_space(task: Task) -> SearchSpace:
    """Baseline = index 0 of every dimension: the task's default prompt."""
    field_names = _FIELD_NAMES.get(task.name, ["Input", "Text"])
    output_names = _OUTPUT_NAMES.get(task.name, ["Answer", "Label"])
    instructions = _INSTRUCTIONS.get(task.name, _GENERIC_INSTRUCTIONS) + [""]

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
