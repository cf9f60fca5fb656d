"""The DSPy adapter for small models: prompttune renders and scores classification calls.

DSPy's ChatAdapter asks the model to answer in `[[ ## field ## ]]` sections, a protocol that
a 135M-parameter model rarely follows; every miss would cost a JSONAdapter retry and end as a
failed example. For the task's classification signature this adapter instead hands the
engine a PromptSpec (the program's instruction and demos on the baseline's format) and takes
the label the evaluator scores as the answer — the same rendering and scoring the other arms
get. Other signatures (DSPy's instruction proposer) keep ChatAdapter, and when a reply to a
single-text-output signature has no field markers, the whole reply is taken as that field.
"""

from __future__ import annotations

from typing import Any

import dspy
from dspy.lm15 import Message, Request
from dspy.utils.exceptions import AdapterParseError

from prompttune.dspy_bridge.engine import MeteredEngine
from prompttune.dspy_bridge.program import OUTPUT_FIELD, ProgramMapping


class PromptSpecAdapter(dspy.ChatAdapter):
    def __init__(self, mapping: ProgramMapping, engine: MeteredEngine) -> None:
        super().__init__()
        self.mapping = mapping
        self.engine = engine

    def __call__(self, lm: dspy.BaseLM, lm_kwargs: dict[str, Any], signature: type[dspy.Signature],
                 demos: list[dict[str, Any]], inputs: dict[str, Any]) -> list[dict[str, Any]]:
        if not self.mapping.is_classifier(signature):
            return super().__call__(lm, lm_kwargs, signature, demos, inputs)
        # Label scoring is deterministic, so sampling options (temperature, n) do not apply.
        example_id = self.mapping.example_id(inputs)
        spec = self.mapping.spec(signature.instructions, demos)
        spec = spec.with_updates(demo_ids=tuple(i for i in spec.demo_ids if i != example_id))
        text = self.engine.expect(spec, example_id)
        try:
            response = lm(Request(model=lm.model, messages=(Message.user(text),)))
        finally:
            self.engine.forget(text)
        return [{OUTPUT_FIELD: response.text}]

    def parse(self, signature: type[dspy.Signature], completion: str) -> dict[str, Any]:
        try:
            return super().parse(signature, completion)
        except AdapterParseError:
            fields = signature.output_fields
            if len(fields) != 1 or next(iter(fields.values())).annotation is not str:
                raise
            return {next(iter(fields)): completion.strip()}
