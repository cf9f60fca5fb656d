"""One prompt, two descriptions: a DSPy classification program and a prompttune PromptSpec.

A program is a `dspy.Predict` over the task's input fields with one output field whose type is
the label words (a Literal); its optimizable parts are the signature's instructions and its
demos. Those map onto the spec's `instruction` and `demo_ids`; every other rendering choice
(templates, separators, label words) stays the baseline's, so a DSPy arm searches exactly the
instruction × demos subspace DSPy was designed for, rendered the way every other arm renders.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

import dspy

from prompttune.core.types import Example
from prompttune.optimizers.proposer import with_label_list
from prompttune.search_spaces.prompt import PromptSpec

OUTPUT_FIELD = "label"


def _key(values: Mapping[str, Any], fields: Sequence[str]) -> tuple[str, ...]:
    return tuple(str(values[f]) for f in fields)


@dataclass
class ProgramMapping:
    """Translates between a program's (instructions, demos, inputs) and (spec, example ids).

    Examples are recognised by their input values, the only thing DSPy hands back (bootstrapped
    demos are rebuilt from traces and carry no id); should two examples share the same inputs,
    the first one's id stands for both.
    """

    base: PromptSpec
    input_fields: tuple[str, ...]
    train: dict[tuple[str, ...], str]
    visible: dict[tuple[str, ...], str]
    signature: type[dspy.Signature]

    @classmethod
    def build(cls, base: PromptSpec, input_fields: Sequence[str], train: Sequence[Example],
              dev: Sequence[Example]) -> "ProgramMapping":
        fields = tuple(input_fields)
        if OUTPUT_FIELD in fields:
            raise ValueError(f"input field {OUTPUT_FIELD!r} clashes with the DSPy output field")
        train_ids: dict[tuple[str, ...], str] = {}
        for ex in train:
            train_ids.setdefault(_key(ex.fields, fields), ex.id)
        visible = dict(train_ids)
        for ex in dev:
            visible.setdefault(_key(ex.fields, fields), ex.id)
        instruction = base.instruction.replace("{labels}", ", ".join(base.label_words))
        spec = {name: (str, dspy.InputField()) for name in fields}
        spec[OUTPUT_FIELD] = (Literal[tuple(base.label_words)], dspy.OutputField())
        signature = dspy.make_signature(spec, instruction or None, "Classify")
        return cls(base, fields, train_ids, visible, signature)

    def is_classifier(self, signature: type[dspy.Signature]) -> bool:
        return (tuple(signature.input_fields) == self.input_fields
                and tuple(signature.output_fields) == (OUTPUT_FIELD,))

    def example(self, ex: Example) -> dspy.Example:
        return dspy.Example(**ex.fields, **{OUTPUT_FIELD: self.base.label_words[ex.label]}).with_inputs(
            *self.input_fields)

    def example_id(self, inputs: Mapping[str, Any]) -> str:
        return self.visible[_key(inputs, self.input_fields)]

    def spec(self, instructions: str, demos: Sequence[Mapping[str, Any]]) -> PromptSpec:
        """The PromptSpec a program's predictor stands for. The untouched starting instruction maps
        back to the baseline's own (it may hold `{labels}`, which DSPy saw expanded); any other
        gets the label-list repair prompttune's own proposals get, so no DSPy instruction loses
        the label set."""
        instruction = self.base.instruction if instructions == self.signature.instructions \
            else with_label_list(instructions, self.base.label_words)
        demo_ids = tuple(dict.fromkeys(self.train[_key(d, self.input_fields)] for d in demos))
        return self.base.with_updates(instruction=instruction, demo_ids=demo_ids)

    def spec_of(self, program: dspy.Predict) -> PromptSpec:
        return self.spec(program.signature.instructions, program.demos)

    def program(self, spec: PromptSpec, demos: Sequence[Example]) -> dspy.Predict:
        """A program for `spec` (its `demos` are the spec's train examples, in order)."""
        predict = dspy.Predict(self.signature)
        if spec.instruction != self.base.instruction:
            labels = ", ".join(self.base.label_words)
            predict.signature = self.signature.with_instructions(spec.instruction.replace("{labels}", labels))
        predict.demos = [self.example(ex) for ex in demos]
        return predict
