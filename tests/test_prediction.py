"""Prediction methods on a fake backend with hand-checked numbers: calibration, ensembles, names."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pytest

from prompttune.backends.backend import Backend
from prompttune.core.errors import UserError
from prompttune.core.types import Example, GenerateRequest, GenerateResult, Prompt, ScoreRequest, ScoreResult
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import Evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.prediction import CalibratedPredictor, EnsemblePredictor, LogitPredictor, make_predictor
from prompttune.scoring.prompt_sources import template_spec

WORDS = ("red", "green", "blue")
EXAMPLES = {e.id: e for e in [Example("a", {"text": "alpha"}, 0), Example("b", {"text": "beta"}, 1),
                              Example("c", {"text": "gamma"}, 2)]}


class TableBackend(Backend):
    """Label log-probs from a function of the prompt text; counts and records every request."""

    def __init__(self, scores: Callable[[str], list[float]],
                 responses: Callable[[str], str] = lambda text: "") -> None:
        self.scores, self.responses = scores, responses
        self.model_id, self.calls, self.texts = "table", 0, []

    def to_text(self, prompt: Prompt) -> str:
        return prompt.text or ""

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        self.calls += len(requests)
        self.texts += [r.text for r in requests]
        return [ScoreResult(tuple(self.scores(r.text)), len(r.text), len(r.continuations)) for r in requests]

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        self.calls += len(requests)
        outs = [self.responses(r.text) for r in requests]
        return [GenerateResult(o, (), len(r.text), len(o.split())) for r, o in zip(requests, outs)]


def make_evaluator(backend: Backend, scoring: str = "logit", cache: ResultCache | None = None) -> Evaluator:
    return Evaluator(backend, EXAMPLES, {}, cache or ResultCache(), BudgetLedger(), scoring=scoring)


# Every prompt prefers "red" whatever the input (bias 0.7/0.2/0.1); the input doubles its own label.
CONTENT_FREE_BIAS = {"N/A": [0.6, 0.3, 0.1], "": [0.8, 0.1, 0.1], "[MASK]": [0.7, 0.2, 0.1]}  # mean .7/.2/.1


def biased(text: str) -> list[float]:
    value = text.split("Text: ", 1)[1].split("\n", 1)[0]
    if value in CONTENT_FREE_BIAS:
        return list(np.log(CONTENT_FREE_BIAS[value]))
    gold = ["alpha", "beta", "gamma"].index(value)
    return [math.log(p * (2.0 if i == gold else 1.0)) for i, p in enumerate([0.7, 0.2, 0.1])]


SPEC = template_spec("Text: {text}\nColour:", ["text"], WORDS)


def test_calibration_removes_a_label_bias_and_flips_predictions() -> None:
    backend = TableBackend(biased)
    evaluator = make_evaluator(backend)
    raw = LogitPredictor(evaluator).predict(SPEC, list(EXAMPLES))
    assert [r.pred for r in raw] == [0, 0, 0]  # the bias wins everywhere
    calibrated = CalibratedPredictor(evaluator).predict(SPEC, list(EXAMPLES))
    assert [r.pred for r in calibrated] == [0, 1, 2]
    # beta: p ∝ (.7, .4, .1), bias (.7, .2, .1) → p / bias ∝ (1, 2, 1) → (.25, .5, .25)
    assert np.allclose(np.exp(calibrated[1].label_logprobs), [0.25, 0.5, 0.25])
    assert np.allclose(np.exp(calibrated[0].label_logprobs), [0.5, 0.25, 0.25])
    # content-free inputs: same template, every field replaced; charged once, then cached
    assert {"Text: N/A\nColour:", "Text: \nColour:", "Text: [MASK]\nColour:"} <= set(backend.texts)
    assert evaluator.ledger.calls == backend.calls == 6
    assert dict(evaluator.ledger.calls_by_kind) == {"score": 3, "content-free": 3}
    again = make_evaluator(backend, scoring="calibrated", cache=evaluator.cache)
    assert [r.pred for r in again.evaluate(SPEC, list(EXAMPLES))] == [0, 1, 2]
    assert backend.calls == 6 and again.ledger.calls == 0


def by_template(text: str) -> list[float]:
    """Template A prefers red, B green, whatever the input; unnormalised on purpose."""
    return list(np.log([1.2, 0.6, 0.2] if text.startswith("A:") else [0.1, 0.5, 0.4]))


def test_ensemble_averages_normalised_label_probabilities() -> None:
    evaluator = make_evaluator(TableBackend(by_template))
    spec_a = template_spec("A: {text}\nColour:", ["text"], WORDS)
    spec_b = template_spec("B: {text}\nColour:", ["text"], WORDS)
    ensemble = EnsemblePredictor(evaluator)
    assert [r.pred for r in ensemble.predict(spec_a, ["a"])] == [0]  # an ensemble of one is its member
    [record] = ensemble.predict([spec_a, spec_b], ["b"])
    # A normalised (.6, .3, .1), B (.1, .5, .4): mean (.35, .4, .25) → green
    assert record.pred == 1 and record.gold == 1
    assert np.allclose(np.exp(record.label_logprobs), [0.35, 0.4, 0.25])
    assert record.prompt_tokens == len("A: beta\nColour:") + len("B: beta\nColour:")
    assert evaluator.ledger.calls == 2 + 1  # "a" under A earlier, "b" under A and B


def test_calibrated_ensemble_averages_calibrated_probabilities() -> None:
    evaluator = make_evaluator(TableBackend(biased))
    other = template_spec("Text: {text}\nColour?", ["text"], WORDS)
    records = EnsemblePredictor(evaluator, base="calibrated").predict([SPEC, other], list(EXAMPLES))
    assert [r.pred for r in records] == [0, 1, 2]


def test_prediction_methods_are_selected_by_name_and_check_their_input() -> None:
    evaluator = make_evaluator(TableBackend(biased))
    assert [make_predictor(n, evaluator).name for n in ("logit", "generate", "calibrated", "ensemble")] == [
        "logit", "generate", "calibrated", "ensemble"]
    with pytest.raises(UserError, match="unknown scoring 'vote'"):
        make_predictor("vote", evaluator)
    with pytest.raises(UserError, match="takes one prompt, got 2"):
        LogitPredictor(evaluator).predict([SPEC, SPEC], ["a"])
    with pytest.raises(UserError, match="has none"):
        EnsemblePredictor(evaluator, base="generate")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="need label scores"):
        EnsemblePredictor(evaluator).predict([SPEC, SPEC.with_updates(cot=True)], ["a"])


def test_generate_scoring_extracts_labels_from_text() -> None:
    backend = TableBackend(biased, responses=lambda text: " blue." if "gamma" in text else " no idea")
    records = make_evaluator(backend, scoring="generate").evaluate(SPEC, ["a", "c"])
    assert [(r.pred, r.text, r.label_logprobs) for r in records] == [(None, " no idea", None),
                                                                   (2, " blue.", None)]
