"""The DSPy adapter for small models: prompttune renders and scores classification calls.

DSPy's ChatAdapter asks the model to answer in `[[ ## field ## ]]` sections, a protocol that
a 135M-parameter model rarely follows; every miss would cost a JSONAdapter retry and end as a
failed example. For the task's classification signature this adapter instead hands the
engine a PromptSpec (the program's instruction and demos on the baseline's format) and takes
the label the evaluator scores as the answer — the same rendering and scoring the other arms
get. Other signatures (instruction proposers, GEPA's reflection, SIMBA's advice) keep
ChatAdapter; when a reply to a signature whose outputs are all text misses the field markers,
what it parsed is kept, the whole reply stands for a missing first field and other missing
fields stay empty, and an empty reply leaves every field empty — instead of a JSONAdapter retry that
a small model fails again (and that, failing, would end the arm: MIPROv2's proposer does not catch it).
"""

from __future__ import annotations

from typing import Any

import dspy
from dspy.lm15 import Message, Request
from dspy.utils.callback import BaseCallback
from dspy.utils.exceptions import AdapterParseError

from prompttune.dspy_bridge.engine import MeteredEngine
from prompttune.dspy_bridge.program import OUTPUT_FIELD, ProgramMapping


def _all_text(signature: type[dspy.Signature]) -> bool:
    """Whether every output is free text, so that any reply can stand for them without guessing a structure."""
    return all(field.annotation is str for field in signature.output_fields.values())


class PromptSpecAdapter(dspy.ChatAdapter):
    def __init__(self, mapping: ProgramMapping, engine: MeteredEngine) -> None:
        super().__init__()
        self.mapping = mapping
        self.engine = engine

    def __call__(self, lm: dspy.BaseLM, lm_kwargs: dict[str, Any], signature: type[dspy.Signature],
                 demos: list[dict[str, Any]], inputs: dict[str, Any]) -> list[dict[str, Any]]:
        if not self.mapping.is_classifier(signature):
            if not _all_text(signature):
                return super().__call__(lm, lm_kwargs, signature, demos, inputs)  # ChatAdapter, JSON retry and all
            try:  # dspy.Adapter's call: ChatAdapter's without its JSONAdapter retry
                return dspy.Adapter.__call__(self, lm, lm_kwargs, signature, demos, inputs)
            except AdapterParseError:  # only an empty reply: `parse` keeps any text
                return [{name: "" for name in signature.output_fields}]
        # Label scoring is deterministic, so sampling options (temperature, n) do not apply.
        example_id = self.mapping.example_id(inputs)
        text = self.engine.expect(self.mapping.spec(signature.instructions, demos), example_id)
        try:
            response = lm(Request(model=lm.model, messages=(Message.user(text),)))
        finally:
            self.engine.forget(text)
        return [{OUTPUT_FIELD: response.text}]

    def parse(self, signature: type[dspy.Signature], completion: str) -> dict[str, Any]:
        try:
            return super().parse(signature, completion)
        except AdapterParseError as error:
            if not _all_text(signature):
                raise
            fields = signature.output_fields
            parsed = error.parsed_result or {}
            first = next(iter(fields))
            return {name: parsed.get(name) or (completion.strip() if name == first else "") for name in fields}


class EvaluationPrefetch(BaseCallback):
    """Hands the engine a whole `dspy.Evaluate` of a classification program before its threads start:
    the engine pays for its queries in the devset's order (`MeteredEngine.prefetch_in_order`), so a
    compile stopped by the cap in mid-evaluation has paid for the same calls whatever the threads'
    timing — which a resumed comparison then replays exactly — and the evaluation reaches the
    backend in as few calls as it allows. Other evaluations are left to the engine's batching."""

    def __init__(self, mapping: ProgramMapping, engine: MeteredEngine) -> None:
        self.mapping = mapping
        self.engine = engine

    def on_evaluate_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        predictors = inputs["program"].predictors()
        if len(predictors) != 1 or not self.mapping.is_classifier(predictors[0].signature):
            return
        devset = inputs.get("devset") or instance.devset
        try:
            spec = self.mapping.spec_of(predictors[0])
            queries = [(spec, self.mapping.example_id(example.inputs())) for example in devset]
        except KeyError:  # an example or demo the arm's data lacks: its asks meet that alone
            return
        self.engine.prefetch_in_order(queries)
