"""GEPA as a compared arm: reflective instruction evolution fed by the metric's feedback text, run until the
cap cannot pay for another iteration (a ledger stopper ends it)."""

from __future__ import annotations

from typing import Any, Literal, Sequence

import dspy
from dspy.teleprompt.gepa import InstructionProposer
from pydantic import Field

from prompttune.core.errors import UserError
from prompttune.core.types import Record
from prompttune.dspy_bridge.arm import DspyArm, Tools, ValsetOptions, exact_label
from prompttune.scoring.ledger import BudgetLedger


def feedback_text(record: Record, labels: Sequence[str]) -> str:
    """GEPA's feedback on one query, from its record: gold and predicted label, the output when it
    named no label, and the model's label scores when it was wrong."""
    gold = labels[record.gold]
    if record.pred is None:
        return (f"Invalid answer: the output {record.text!r} names none of the labels ({', '.join(labels)}); "
                f"the correct label is {gold!r}.")
    if record.correct:
        return f"Correct: the answer {gold!r} is the correct label."
    text = f"Wrong: the answer was {labels[record.pred]!r}, the correct label is {gold!r}."
    if record.label_logprobs:
        ranked = sorted(zip(record.label_logprobs, labels), reverse=True)
        text += " The model's label log-probabilities: " + ", ".join(f"{w} {lp:.2f}" for lp, w in ranked) + "."
    return text


def feedback_metric(tools: Tools) -> Any:
    """GEPA's metric: the exact-label score, and, when GEPA asks for feedback on a predictor, the
    text of `feedback_text` for the query the captured trace shows (its record is a cache hit)."""
    mapping, engine = tools.mapping, tools.engine

    def metric(gold: dspy.Example, pred: dspy.Prediction, trace: Any = None, pred_name: str | None = None,
               pred_trace: Any = None) -> float | dspy.Prediction:
        score = float(exact_label(gold, pred))
        if pred_name is None or not trace:
            return score
        predictor, inputs, _ = next(step for step in reversed(trace) if mapping.is_classifier(step[0].signature))
        spec = mapping.spec(predictor.signature.instructions, predictor.demos)
        record = engine.record(spec, mapping.example_id(inputs))
        return dspy.Prediction(score=score, feedback=feedback_text(record, spec.label_words))

    return metric


class GepaOptions(ValsetOptions):
    max_metric_calls: int | None = Field(None, ge=1, description="GEPA's budget (default: sized to the cap)")
    reflection_minibatch_size: int = Field(3, ge=1, description="train examples per reflection (DSPy's 3)")
    candidate_selection_strategy: Literal["pareto", "current_best"] = Field("pareto", description="DSPy's pareto")
    use_merge: bool = Field(True, description="GEPA's merge proposals (DSPy's default on)")
    reflection_max_tokens: int = Field(256, ge=16, description="longest reflection reply")


class LedgerStopper:
    """GEPA's stop condition on the arm's ledger: stop when less than `reserve` calls are left
    (GEPA checks its stoppers between iterations)."""

    def __init__(self, ledger: BudgetLedger, reserve: int) -> None:
        self.ledger, self.reserve = ledger, reserve

    def __call__(self, gepa_state: Any) -> bool:
        remaining = self.ledger.remaining_calls()
        return remaining is not None and remaining < self.reserve


class Gepa(DspyArm):
    """GEPA with a feedback metric, reflections sampled at DSPy's temperature 1.0 on the proposer model,
    run until the cap cannot pay for another iteration."""

    name = "dspy-gepa"
    Options = GepaOptions

    @property
    def iteration(self) -> int:
        """What a GEPA iteration costs unless it is accepted: the parent and the child on a reflective
        minibatch and the reflection (a merge tries its child on 5 valset examples)."""
        return 2 * self.options.reflection_minibatch_size + 1

    def _settle(self) -> str:
        o = self.options
        first_reflection = self.valset_size + 2 * o.reflection_minibatch_size
        self._require(first_reflection + 1, f"the seed program on a {self.valset_size}-example valset and one "
                                            f"reflection on {o.reflection_minibatch_size} train examples")
        if o.max_metric_calls is not None and o.max_metric_calls < first_reflection:
            raise UserError(f"dspy-gepa: max_metric_calls={o.max_metric_calls} leaves no reflection (the seed "
                            f"program on the valset and one minibatch pair take {first_reflection})")
        # A metric call costs at most one call (none when cached), so the cap binds before this does.
        self.max_metric_calls = o.max_metric_calls or self.cap
        budget = (f"max_metric_calls={self.max_metric_calls} (given)" if o.max_metric_calls else
                  f"max_metric_calls={self.max_metric_calls} (the cap: a metric call costs at most one call)")
        return (f"GEPA: {budget}, stopped before an iteration when the cap has less than one costs unless it "
                f"is accepted ({self.iteration} calls: the parent and the child on a reflective minibatch and the "
                f"reflection), so it spends the cap but for at most {self.iteration - 1} calls; a child accepted "
                f"then would be scored on the valset, and the cap may cut that scoring short (the arm then keeps "
                f"the best program scored on the whole valset, GEPA's own choice without that child); "
                f"valset {self.valset_size} dev examples drawn with the arm seed (DSPy: the smallest valset that "
                f"represents the task), reflective minibatches of {o.reflection_minibatch_size} from train, "
                f"candidate selection '{o.candidate_selection_strategy}', merge {'on' if o.use_merge else 'off'}; "
                f"the metric's feedback names the gold and predicted label, an invalid output and the label "
                f"scores; reflections on the proposer model (the task model unless --proposer-model) at "
                f"temperature 1.0 (DSPy's advice for reflection_lm), ≤ {o.reflection_max_tokens} tokens, each "
                f"charged, read by prompttune's adapter instead of JSONAdapter.")

    def _compile(self, student: dspy.Predict, tools: Tools) -> dspy.Module:
        o = self.options
        optimizer = dspy.GEPA(
            metric=feedback_metric(tools), max_metric_calls=self.max_metric_calls,
            reflection_minibatch_size=o.reflection_minibatch_size,
            candidate_selection_strategy=o.candidate_selection_strategy,
            reflection_lm=tools.lm.copy(temperature=1.0, max_tokens=o.reflection_max_tokens),
            instruction_proposer=InstructionProposer(adapter=tools.adapter), use_merge=o.use_merge,
            num_threads=tools.threads, seed=tools.seed,
            gepa_kwargs={"stop_callbacks": [LedgerStopper(tools.engine.evaluator.ledger, self.iteration)]})
        return optimizer.compile(student, trainset=tools.trainset, valset=tools.valset)
