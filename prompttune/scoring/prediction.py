"""Prediction methods: how model outputs become one label per example, selectable by name.

- `logit`: the label whose continuation is most likely (direct scoring; CoT prompts generate).
- `generate`: greedy decoding, then the extraction rule of `extraction.py`.
- `choice`: constrained greedy decoding over the label continuations (`serve: choice`), a prompt's batch offsets
  as its labels' first-token `logit_bias` (`contract.choice_bias`): what the server decodes, exactly.
- `calibrated`: contextual calibration (Zhao et al. 2021). The label distribution a prompt gives
  for content-free inputs ("N/A", "", "[MASK]") estimates its bias; dividing by it and
  renormalising removes a preference for one label that no input justifies.
- batch calibration (Zhou et al. 2024), a prompt's own choice under `logit`: its `label_bias`, the
  mean normalised label log-probabilities over unlabelled inputs, is subtracted from each example's.
  On the embedded model demos can push one label onto almost every input (sst2: 0.52 with 99% one
  label), which content-free inputs do not measure and a mean over real inputs does.
- `ensemble`: mean label probability over several templates (template ensembles, Voronov et
  al. 2024), so one template's quirks weigh less.

Every call goes through the evaluator, hence through its cache and its ledger.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Callable, ClassVar, Literal, Protocol, Sequence

import numpy as np

from prompttune.core.errors import UserError
from prompttune.core.types import Record
from prompttune.scoring.extraction import extract_label
from prompttune.scoring.records import Mode, Output, Query, content_free_id
from prompttune.search_spaces.prompt import PromptSpec

Scoring = Literal["logit", "generate", "choice", "calibrated", "ensemble"]
Prompts = PromptSpec | Sequence[PromptSpec]
CONTENT_FREE = ("N/A", "", "[MASK]")


def label_logsumexp(values: np.ndarray) -> np.ndarray:
    """`scipy.special.logsumexp` over the last axis (one label set per row), kept as a length-1 axis, operation
    for operation (the same floats: offsets and candidate ids must not move) without its array-API dispatch.
    Whole batches go at once: one call per calibrated answer took half of a search's engine time."""
    top = values.max(axis=-1, keepdims=True)
    at_top = values == top
    count = at_top.sum(axis=-1, dtype=values.dtype, keepdims=True)
    rest = np.exp(np.where(at_top, -np.inf, values) - top).sum(axis=-1, keepdims=True)
    return np.log1p(np.where(rest == 0, rest, rest / count)) + np.log(count) + top


def normalized_logprobs(logprobs: Sequence[float] | np.ndarray) -> np.ndarray:
    """Log-probabilities renormalised over the label set (they sum to 1 in probability); a 2-D array is one
    label set per row."""
    values = np.asarray(logprobs, dtype=float)
    return values - label_logsumexp(values)


def calibrate(logprobs: Sequence[float] | np.ndarray, bias: np.ndarray) -> np.ndarray:
    """log of p / bias, renormalised: the calibrated label distribution of one example (or one per row)."""
    return normalized_logprobs(normalized_logprobs(logprobs) - np.log(bias))


def debiased(logprobs: Sequence[float] | np.ndarray, bias: Sequence[float]) -> np.ndarray:
    """Batch calibration of one example (or one per row): normalised label log-probabilities less `bias`,
    renormalised."""
    return normalized_logprobs(normalized_logprobs(logprobs) - np.asarray(bias))


def label_bias(records: Sequence[Record]) -> tuple[float, ...]:
    """Batch calibration's offsets: the mean normalised label log-probabilities over `records`' inputs
    (their labels unused)."""
    rows = [r.label_logprobs for r in records if r.label_logprobs]
    return tuple(np.mean(normalized_logprobs(rows), axis=0).tolist()) if rows else ()


def average_probabilities(members: Sequence[Sequence[float]]) -> tuple[float, ...]:
    """log of the mean normalised label probability over ensemble members."""
    probs = np.exp([normalized_logprobs(m) for m in members]).mean(axis=0)
    return tuple(float(x) for x in np.log(probs))


def _argmax(values: Sequence[float]) -> int:
    """First maximum, so ties resolve to the lower label index as in direct scoring (NaN first, as numpy
    has it)."""
    best = max(values)
    return values.index(best) if best == best and all(v == v for v in values) else int(np.argmax(values))


def _specs(prompts: Prompts) -> tuple[PromptSpec, ...]:
    return (prompts,) if isinstance(prompts, PromptSpec) else tuple(prompts)


def _scored(output: Output) -> Record:
    logprobs = output.logprobs or ()
    return Record(output.example.id, output.example.label, _argmax(logprobs), logprobs, None,
                  output.prompt_tokens, output.completion_tokens, output.cached)


def _generated(output: Output, spec: PromptSpec) -> Record:
    text = output.text or ""
    return Record(output.example.id, output.example.label,
                  extract_label(text, spec.label_words, cot=spec.cot), None, text,
                  output.prompt_tokens, output.completion_tokens, output.cached)


class OutputSource(Protocol):
    """Where a prediction method gets model outputs: the evaluator, through its cache and ledger. A protocol, so
    the evaluator hands itself in (`make_predictor`) and this module never names it."""

    def outputs(self, spec: PromptSpec, example_ids: Sequence[str], mode: Mode,
                continuations: Sequence[tuple[str, ...]] | None = None, kind: str | None = None) -> list[Output]:
        """One output per example of `spec`."""

    def outputs_many(self, queries: Sequence[Query], mode: Mode, kind: str | None = None) -> list[list[Output]]:
        """`outputs` for several prompts in one backend call."""


class Predictor(ABC):
    """A prediction method bound to an evaluator; `predict` gives one record per example id.

    Single-prompt methods take one PromptSpec; `ensemble` takes several.
    """

    name: ClassVar[str]

    def __init__(self, evaluator: OutputSource) -> None:
        self.evaluator = evaluator

    @abstractmethod
    def predict(self, prompts: Prompts, example_ids: Sequence[str]) -> list[Record]:
        """Per-example records, in the order of `example_ids`."""

    def prefetch(self, specs: Sequence[PromptSpec]) -> None:
        """Make per-prompt auxiliary calls for many prompts at once (nothing for most methods)."""

    def _single(self, prompts: Prompts) -> PromptSpec:
        specs = _specs(prompts)
        if len(specs) != 1:
            raise UserError(f"scoring {self.name!r} takes one prompt, got {len(specs)}; "
                            f"use 'ensemble' to combine several")
        return specs[0]


class LogitPredictor(Predictor):
    """Direct scoring; a prompt that carries `calibrate` is scored calibrated (its own choice)."""

    name = "logit"

    def predict(self, prompts: Prompts, example_ids: Sequence[str]) -> list[Record]:
        spec = self._single(prompts)
        if spec.cot:
            return GeneratePredictor(self.evaluator).predict(spec, example_ids)
        if spec.calibrate:
            return CalibratedPredictor(self.evaluator).predict(spec, example_ids)
        records = direct_records(self.evaluator, spec, example_ids)
        if spec.label_bias:
            return _adjusted(records, lambda scores: debiased(scores, spec.label_bias))
        return records


def _adjusted(records: Sequence[Record], adjust: Callable[[np.ndarray], np.ndarray]) -> list[Record]:
    """Each record's label scores adjusted (calibration: `adjust` takes one label set per row), its prediction
    their argmax; records without label scores as they are."""
    scored = [i for i, r in enumerate(records) if r.label_logprobs]
    adjusted = list(records)
    if scored:
        rows = adjust(np.array([records[i].label_logprobs for i in scored], dtype=float))
        for i, row, pred in zip(scored, rows.tolist(), rows.argmax(axis=1).tolist()):
            adjusted[i] = replace(records[i], pred=pred, label_logprobs=tuple(row))
    return adjusted


def direct_records(evaluator: OutputSource, spec: PromptSpec, example_ids: Sequence[str]) -> list[Record]:
    """The label with the highest raw log-probability, per example."""
    return [_scored(o) for o in evaluator.outputs(spec, example_ids, "score")]


class GeneratePredictor(Predictor):
    name = "generate"

    def predict(self, prompts: Prompts, example_ids: Sequence[str]) -> list[Record]:
        spec = self._single(prompts)
        return [_generated(o, spec) for o in self.evaluator.outputs(spec, example_ids, "generate")]


class ChoicePredictor(Predictor):
    """The label constrained decoding picks, its offsets applied as the server applies them; the record's label
    scores are the labels' first-token log-probs there (margins and batch offsets read them)."""

    name = "choice"

    def predict(self, prompts: Prompts, example_ids: Sequence[str]) -> list[Record]:
        spec = self._single(prompts)
        if spec.cot or spec.calibrate:
            raise UserError("serve choice decodes a label from its first token: a chain-of-thought or contextually "
                            "calibrated prompt cannot be served that way")
        return [Record(o.example.id, o.example.label, o.choice, o.logprobs, None, o.prompt_tokens,
                       o.completion_tokens, o.cached) for o in self.evaluator.outputs(spec, example_ids, "choice")]


class CalibratedPredictor(Predictor):
    """Direct scoring divided by the prompt's content-free label distribution.

    Content-free inputs are the same spec (same demos) with every input field replaced by the
    content-free string; they are scored once per prompt, cached and charged as `content-free`.
    CoT prompts have no label scores to calibrate and keep their generated answers.
    """

    name = "calibrated"

    def __init__(self, evaluator: OutputSource, content_free: Sequence[str] = CONTENT_FREE) -> None:
        super().__init__(evaluator)
        self.content_free = tuple(content_free)

    def _probes(self, specs: Sequence[PromptSpec]) -> list[list[Output]]:
        ids = [content_free_id(value) for value in self.content_free]
        return self.evaluator.outputs_many([Query(s, ids) for s in specs], "score", kind="content-free")

    def prefetch(self, specs: Sequence[PromptSpec]) -> None:
        """Score the (tiny) content-free probes of all prompts in one backend call; later cache hits."""
        self._probes([s for s in specs if not s.cot])

    def bias(self, spec: PromptSpec) -> np.ndarray:
        """Mean normalised label probabilities over the content-free inputs."""
        [outputs] = self._probes([spec])
        return np.exp([normalized_logprobs(o.logprobs or ()) for o in outputs]).mean(axis=0)

    def predict(self, prompts: Prompts, example_ids: Sequence[str]) -> list[Record]:
        spec = self._single(prompts)
        if spec.cot:
            return GeneratePredictor(self.evaluator).predict(spec, example_ids)
        records = direct_records(self.evaluator, spec, example_ids)
        bias = self.bias(spec)
        return _adjusted(records, lambda scores: calibrate(scores, bias))


class EnsemblePredictor(Predictor):
    """Mean label probability over the given templates, each scored by `base` (logit or calibrated).

    An ensemble of one template predicts like `base`. Token counts add up over members.
    """

    name = "ensemble"

    def __init__(self, evaluator: OutputSource, base: Literal["logit", "calibrated"] = "logit") -> None:
        super().__init__(evaluator)
        if base not in ("logit", "calibrated"):
            raise UserError(f"an ensemble averages label probabilities; base {base!r} has none "
                            f"(use logit or calibrated)")
        self.base = make_predictor(base, evaluator)

    def predict(self, prompts: Prompts, example_ids: Sequence[str]) -> list[Record]:
        members = [self.base.predict(spec, example_ids) for spec in _specs(prompts)]
        if not members:
            raise UserError("an ensemble needs at least one prompt")
        if any(r.label_logprobs is None for m in members for r in m):
            raise UserError("ensemble members need label scores; CoT prompts are answered by generation")
        records = []
        for per_member in zip(*members):
            first = per_member[0]
            combined = average_probabilities([r.label_logprobs or () for r in per_member])
            records.append(Record(first.example_id, first.gold, _argmax(combined), combined, None,
                                  sum(r.prompt_tokens for r in per_member),
                                  sum(r.completion_tokens for r in per_member),
                                  all(r.cached for r in per_member)))
        return records


PREDICTORS: dict[str, type[Predictor]] = {
    cls.name: cls for cls in (LogitPredictor, GeneratePredictor, ChoicePredictor, CalibratedPredictor, EnsemblePredictor)}


def make_predictor(name: str, evaluator: OutputSource) -> Predictor:
    """The prediction method called `name`, bound to `evaluator`."""
    if name not in PREDICTORS:
        raise UserError(f"unknown scoring {name!r}; choose from {', '.join(PREDICTORS)}")
    return PREDICTORS[name](evaluator)
