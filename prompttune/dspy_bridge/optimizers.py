"""DSPy's optimizers as compared arms: their options, their settings under a call cap, their compile call.

DSPy counts no model calls, so each arm takes the settings DSPy's own documentation and defaults
recommend, and sizes to the cap only what DSPy leaves to the user (how many programs, steps or
metric calls). The metered engine's ledger still enforces the cap; an arm whose smallest useful
run cannot fit it says so in one line before any model call. Every arm draws its valset from the
dev split with the arm seed (MIPROv2's light mode validates on 100 examples; GEPA asks for the
smallest valset that represents the task), so `valset_size` defaults to 100 for all of them.

Settings are plain numbers computed from (cap, split sizes, options), so `compare` can check
them before it loads a model; `compile` then runs DSPy with them on the arm's `Tools`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Sequence

import dspy
from dspy.teleprompt.gepa import InstructionProposer
from dspy.teleprompt.mipro_optimizer_v2 import AUTO_RUN_SETTINGS, MIN_MINIBATCH_SIZE
from pydantic import Field

from prompttune.core.errors import UserError
from prompttune.core.types import Record
from prompttune.dspy_bridge.engine import MeteredEngine
from prompttune.dspy_bridge.program import OUTPUT_FIELD, ProgramMapping
from prompttune.optimizers.base import OptimizerOptions, validate_options

SUMMARY_CALLS = 11  # MIPROv2's dataset summary: at most 10 observation calls and one summary
DSPY_TRIES_PER_DEMO = 2  # bootstrapping keeps the traces the metric passes: about 2 tries per demo at 50%


def exact_label(example: dspy.Example, prediction: dspy.Prediction, trace: Any = None) -> bool:
    return getattr(prediction, OUTPUT_FIELD) == getattr(example, OUTPUT_FIELD)


@dataclass(frozen=True)
class Sizes:
    """The splits an arm draws from: the train split (demos, SIMBA's examples) and the dev split (valsets)."""

    train: int
    dev: int


@dataclass
class Tools:
    """What one arm-seed run hands DSPy: the metered LM and adapter, the arm seed, and its data —
    the train split in the arm seed's order and the valset drawn from dev with that seed."""

    lm: dspy.LM
    adapter: dspy.Adapter
    engine: MeteredEngine
    mapping: ProgramMapping
    seed: int
    trainset: list[dspy.Example]
    valset: list[dspy.Example]


class DspyArm(ABC):
    """One DSPy optimizer's settings for one cap; `UserError` when its options are bad or its
    smallest run does not fit the cap."""

    name: ClassVar[str]
    Options: ClassVar[type[OptimizerOptions]]

    def __init__(self, cap: int, sizes: Sizes, options: dict[str, Any]) -> None:
        self.cap = cap
        self.sizes = sizes
        self.options: Any = validate_options(self.name, self.Options, options)
        # Arms that take no valset (SIMBA) have no valset_size and draw none.
        self.valset_size = min(getattr(self.options, "valset_size", 0), sizes.dev)
        self.description = self._settle()

    def _require(self, minimum: int, smallest_run: str) -> None:
        if minimum > self.cap:
            raise UserError(f"{self.name} needs at least {minimum} calls ({smallest_run}); the cap is {self.cap}")

    @abstractmethod
    def _settle(self) -> str:
        """Fix the settings for the cap; returns what they are and why."""

    @abstractmethod
    def compile(self, student: dspy.Predict, tools: Tools) -> dspy.Module:
        """Run DSPy's optimizer; its calls go through `tools.lm` (and so the ledger)."""

    def selection(self, trainset: list[dspy.Example], valset: list[dspy.Example]) -> list[dspy.Example]:
        """The examples the optimizer scores whole programs on to choose one: its valset."""
        return valset


class ValsetOptions(OptimizerOptions):
    valset_size: int = Field(100, ge=1, description="dev examples drawn with the arm seed as DSPy's valset")


class MiproOptions(ValsetOptions):
    auto: Literal["light", "medium", "heavy"] | None = Field(
        "light", description="MIPROv2's run mode; null to set num_candidates and num_trials instead")
    num_candidates: int | None = Field(None, ge=2, description="with auto=null: demo sets and instructions")
    num_trials: int | None = Field(None, ge=1, description="with auto=null: Bayesian-optimization trials")
    max_demos: int = Field(4, ge=0, description="bootstrapped and labeled demos per program (DSPy's 4)")
    minibatch_size: int = Field(35, ge=1, description="valset examples a trial is scored on (DSPy's 35)")
    minibatch_full_eval_steps: int = Field(5, ge=1, description="trials between full-valset scorings")
    program_aware_proposer: bool = Field(False, description="show the proposer DSPy's module source code")


def _recommended_trials(candidates: int, zero_shot: bool) -> int:
    """MIPROv2's own rule for num_trials, for one predictor (instructions, and demos unless zero-shot)."""
    variables = 1 if zero_shot else 2
    return int(max(2 * variables * math.log2(candidates), 1.5 * candidates))


class Mipro(DspyArm):
    """MIPROv2 as its `auto` modes configure it; proposals are sampled at DSPy's temperature 1.0."""

    name = "dspy-mipro"
    Options = MiproOptions

    def _settle(self) -> str:
        o = self.options
        zero_shot = o.max_demos == 0
        if o.auto is None:
            if o.num_candidates is None or o.num_trials is None:
                raise UserError("dspy-mipro: auto=null needs both num_candidates and num_trials")
            sets = instructions = o.num_candidates
            trials, val = o.num_trials, self.valset_size
            minibatch = o.minibatch_size < val
        else:
            if o.num_candidates is not None or o.num_trials is not None:
                raise UserError(f"dspy-mipro: auto={o.auto} sets num_candidates and num_trials itself; "
                                "pass auto=null to set them")
            sets = AUTO_RUN_SETTINGS[o.auto]["n"]
            instructions = sets if zero_shot else sets // 2
            trials = _recommended_trials(sets, zero_shot)
            # A larger valset would be cut by MIPROv2 itself, to a sample the arm could not follow.
            val = self.valset_size = min(AUTO_RUN_SETTINGS[o.auto]["val_size"], self.valset_size)
            minibatch = val > MIN_MINIBATCH_SIZE
        batch = min(o.minibatch_size, val)
        bootstrap = 0 if zero_shot else max(sets - 2, 0) * DSPY_TRIES_PER_DEMO * o.max_demos
        proposals = SUMMARY_CALLS + 2 * o.program_aware_proposer + instructions
        full_evals = trials // o.minibatch_full_eval_steps + 1 if minibatch else 0
        estimate = bootstrap + proposals + val + trials * (batch if minibatch else val) + full_evals * val
        self.minibatch = minibatch
        mode = f"auto='{o.auto}' (DSPy's default mode is 'light')" if o.auto else "auto=None"
        batches = f"minibatches of {batch}, full valset every {o.minibatch_full_eval_steps} trials" if minibatch \
            else "no minibatches"
        demos = "zero-shot" if zero_shot else f"{sets} demo sets"
        return (f"MIPROv2 {mode}: {demos}, {instructions} proposed instructions, {trials} trials "
                f"(MIPROv2's rule), valset {val} dev examples drawn with the arm seed, {batches}, "
                f"≤ {o.max_demos} bootstrapped + {o.max_demos} labeled demos, proposals sampled at temperature "
                f"1.0 with seeds from the arm seed (each sample charged), program-aware proposer "
                f"{'on' if o.program_aware_proposer else 'off (its prompts hold DSPy source code)'}; "
                f"estimated {estimate} calls for a cap of {self.cap}"
                f"{'' if estimate <= self.cap else ': the cap stops it early'}.")

    def compile(self, student: dspy.Predict, tools: Tools) -> dspy.Module:
        o = self.options
        optimizer = dspy.MIPROv2(metric=exact_label, prompt_model=tools.lm, task_model=tools.lm, auto=o.auto,
                                 num_candidates=o.num_candidates, max_bootstrapped_demos=o.max_demos,
                                 max_labeled_demos=o.max_demos, num_threads=1, seed=tools.seed, verbose=False)
        return optimizer.compile(student, trainset=tools.trainset, valset=tools.valset, num_trials=o.num_trials,
                                 minibatch=self.minibatch, minibatch_size=min(o.minibatch_size, len(tools.valset)),
                                 minibatch_full_eval_steps=o.minibatch_full_eval_steps,
                                 program_aware_proposer=o.program_aware_proposer)


class BfrsOptions(ValsetOptions):
    max_demos: int = Field(4, ge=1, description="bootstrapped demos per program (DSPy's 4)")
    max_labeled_demos: int | None = Field(None, ge=0, description="labeled demos (default: max_demos; DSPy's 16)")
    num_candidate_programs: int | None = Field(None, ge=0, description="random programs (default: what the cap "
                                                                          "pays for, up to DSPy's 16)")


class Bfrs(DspyArm):
    """BootstrapFewShotWithRandomSearch with as many random programs as the cap pays for."""

    name = "dspy-bfrs"
    Options = BfrsOptions
    DSPY_CANDIDATES = 16

    def _cost(self, candidates: int) -> int:
        """Zero-shot, labeled-only and unshuffled programs, then the random ones: each scored on
        the valset, each bootstrapped one after its bootstrap."""
        bootstrap = DSPY_TRIES_PER_DEMO * self.options.max_demos
        return (candidates + 3) * self.valset_size + (candidates + 1) * bootstrap

    def _settle(self) -> str:
        o = self.options
        self.labeled = o.max_demos if o.max_labeled_demos is None else o.max_labeled_demos
        fitted = max((n for n in range(self.DSPY_CANDIDATES + 1) if self._cost(n) <= self.cap), default=0)
        self.candidates = fitted if o.num_candidate_programs is None else o.num_candidate_programs
        estimate = self._cost(self.candidates)
        return (f"BootstrapFewShotWithRandomSearch: num_candidate_programs={self.candidates} (DSPy's default 16, "
                f"sized to the cap) plus its zero-shot, labeled-only and unshuffled programs, ≤ {o.max_demos} "
                f"bootstrapped and {self.labeled} labeled demos, valset {self.valset_size} dev examples drawn "
                f"with the arm seed; estimated {estimate} calls for a cap of {self.cap}"
                f"{'' if estimate <= self.cap else ': the cap stops it early'}. DSPy's candidate seeds are "
                f"fixed, so the arm seed orders the trainset.")

    def compile(self, student: dspy.Predict, tools: Tools) -> dspy.Module:
        optimizer = dspy.BootstrapFewShotWithRandomSearch(
            metric=exact_label, max_bootstrapped_demos=self.options.max_demos, max_labeled_demos=self.labeled,
            num_candidate_programs=self.candidates, num_threads=1)
        return optimizer.compile(student, trainset=tools.trainset, valset=tools.valset)


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


class Gepa(DspyArm):
    """GEPA with a feedback metric, reflections sampled at DSPy's temperature 1.0 on the same model."""

    name = "dspy-gepa"
    Options = GepaOptions

    def metric_calls(self, calls: int) -> int:
        """The most metric calls that leave room in `calls` for the reflections among them: each
        reflection follows two minibatch evaluations (the parent's and, after it, the child's)."""
        per_reflection = 2 * self.options.reflection_minibatch_size
        return (per_reflection * calls + self.valset_size) // (per_reflection + 1)

    def _settle(self) -> str:
        o = self.options
        first_reflection = self.valset_size + 2 * o.reflection_minibatch_size
        self._require(first_reflection + 1, f"the seed program on a {self.valset_size}-example valset and one "
                                            f"reflection on {o.reflection_minibatch_size} train examples")
        if o.max_metric_calls is not None and o.max_metric_calls < first_reflection:
            raise UserError(f"dspy-gepa: max_metric_calls={o.max_metric_calls} leaves no reflection (the seed "
                            f"program on the valset and one minibatch pair take {first_reflection})")
        calls = o.max_metric_calls or self.metric_calls(self.cap)
        sized = "given" if o.max_metric_calls else "sized to the cap, reflections included"
        return (f"GEPA: max_metric_calls={calls} ({sized}), "
                f"valset {self.valset_size} dev examples drawn with the arm seed (DSPy: the smallest valset that "
                f"represents the task), reflective minibatches of {o.reflection_minibatch_size} from train, "
                f"candidate selection '{o.candidate_selection_strategy}', merge {'on' if o.use_merge else 'off'}; "
                f"the metric's feedback names the gold and predicted label, an invalid output and the label "
                f"scores; reflections on the same model at temperature 1.0 (DSPy's advice for reflection_lm), "
                f"≤ {o.reflection_max_tokens} tokens, each charged, read by prompttune's adapter instead of "
                f"JSONAdapter.")

    def compile(self, student: dspy.Predict, tools: Tools) -> dspy.Module:
        o = self.options
        remaining = tools.engine.evaluator.ledger.remaining_calls()
        calls = o.max_metric_calls or self.metric_calls(self.cap if remaining is None else remaining)
        optimizer = dspy.GEPA(
            metric=feedback_metric(tools), max_metric_calls=calls,
            reflection_minibatch_size=o.reflection_minibatch_size,
            candidate_selection_strategy=o.candidate_selection_strategy,
            reflection_lm=tools.lm.copy(temperature=1.0, max_tokens=o.reflection_max_tokens),
            instruction_proposer=InstructionProposer(adapter=tools.adapter), use_merge=o.use_merge,
            num_threads=1, seed=tools.seed)
        return optimizer.compile(student, trainset=tools.trainset, valset=tools.valset)


class CoproOptions(ValsetOptions):
    breadth: int | None = Field(None, ge=2, description="instructions per round (default: DSPy's 10 if it fits)")
    depth: int | None = Field(None, ge=1, description="rounds (default: DSPy's 3, fewer if the cap says so)")
    init_temperature: float = Field(1.4, gt=0, le=2, description="proposal temperature (DSPy's 1.4)")


class Copro(DspyArm):
    """COPRO: DSPy's breadth and depth, depth cut first, then breadth, until a whole run fits the cap."""

    name = "dspy-copro"
    Options = CoproOptions

    def _cost(self, breadth: int, depth: int) -> int:
        """breadth - 1 samples, then breadth per later round; every candidate scored on the valset."""
        return breadth - 1 + (depth - 1) * breadth + depth * breadth * self.valset_size

    def _settle(self) -> str:
        o = self.options
        breadths = [o.breadth] if o.breadth else range(10, 1, -1)
        depths = [o.depth] if o.depth else range(3, 0, -1)
        smallest = (breadths[-1], depths[-1])
        self._require(self._cost(*smallest), f"breadth {smallest[0]}, depth {smallest[1]} on a "
                                             f"{self.valset_size}-example valset")
        self.breadth, self.depth = next((b, d) for b in breadths for d in depths if self._cost(b, d) <= self.cap)
        return (f"COPRO: breadth={self.breadth}, depth={self.depth} (DSPy's 10 and 3, cut to fit the cap), "
                f"instructions sampled at temperature {o.init_temperature} with seeds from the arm seed (each "
                f"sample charged), every candidate scored on a valset of {self.valset_size} dev examples drawn "
                f"with the arm seed; at most {self._cost(self.breadth, self.depth)} calls for a cap of {self.cap}. "
                f"COPRO's proposed output prefixes are not part of prompttune's rendering and are dropped.")

    def compile(self, student: dspy.Predict, tools: Tools) -> dspy.Module:
        optimizer = dspy.COPRO(prompt_model=tools.lm, metric=exact_label, breadth=self.breadth, depth=self.depth,
                               init_temperature=self.options.init_temperature)
        return optimizer.compile(student, trainset=tools.valset,
                                 eval_kwargs={"num_threads": 1, "display_progress": False})


class SimbaOptions(OptimizerOptions):
    trainset_size: int = Field(100, ge=1, description="train examples SIMBA samples from and validates on")
    bsize: int = Field(32, ge=1, description="mini-batch size (DSPy's 32)")
    num_candidates: int = Field(6, ge=1, description="new programs per step (DSPy's 6)")
    max_steps: int | None = Field(None, ge=1, description="steps (default: DSPy's 8, fewer if the cap says so)")
    max_demos: int = Field(4, ge=0, description="demos a program may hold (DSPy's 4)")


class Simba(DspyArm):
    """SIMBA: DSPy's batch size and candidates, as many of its 8 steps as fit the cap."""

    name = "dspy-simba"
    Options = SimbaOptions
    DSPY_STEPS = 8

    def _cost(self, steps: int) -> int:
        """At most: each step's trajectories (one program at first, then up to num_candidates),
        its new programs on the batch with an advice call each (and a JSON retry), then the
        final scoring of up to num_candidates + 1 winners on the whole trainset."""
        o = self.options
        candidates = (o.num_candidates + 1) * (o.bsize + 2)
        trajectories = o.bsize + (steps - 1) * o.num_candidates * o.bsize
        return trajectories + steps * candidates + min(steps, o.num_candidates) * self.trainset_size + \
            self.trainset_size

    def _settle(self) -> str:
        o = self.options
        self.trainset_size = min(o.trainset_size, self.sizes.train)
        if self.trainset_size < o.bsize:
            raise UserError(f"dspy-simba draws mini-batches of {o.bsize} from {self.trainset_size} train examples: "
                            f"lower bsize or raise trainset_size and --train-size")
        steps = [o.max_steps] if o.max_steps else range(self.DSPY_STEPS, 0, -1)
        self._require(self._cost(steps[-1]), f"{steps[-1]} step of {o.num_candidates} candidates on mini-batches "
                                             f"of {o.bsize}, validated on {self.trainset_size} train examples")
        self.steps = next(s for s in steps if self._cost(s) <= self.cap)
        return (f"SIMBA: max_steps={self.steps} (DSPy's 8, cut to fit the cap), bsize={o.bsize}, "
                f"num_candidates={o.num_candidates}, max_demos={o.max_demos} (DSPy: 32, 6, 4); SIMBA takes no "
                f"valset: it samples mini-batches from and validates on {self.trainset_size} train examples drawn "
                f"with the arm seed. prompttune scores labels deterministically, so SIMBA's temperature-1.0 "
                f"resampling of one program gives one answer: its variation comes from sampling among "
                f"programs. At most {self._cost(self.steps)} calls for a cap of {self.cap}.")

    def compile(self, student: dspy.Predict, tools: Tools) -> dspy.Module:
        o = self.options
        optimizer = dspy.SIMBA(metric=exact_label, bsize=o.bsize, num_candidates=o.num_candidates,
                               max_steps=self.steps, max_demos=o.max_demos, prompt_model=tools.lm, num_threads=1)
        return optimizer.compile(student, trainset=self.selection(tools.trainset, tools.valset), seed=tools.seed)

    def selection(self, trainset: list[dspy.Example], valset: list[dspy.Example]) -> list[dspy.Example]:
        return trainset[:self.trainset_size]


DSPY_OPTIMIZERS: dict[str, type[DspyArm]] = {arm.name: arm for arm in (Mipro, Bfrs, Gepa, Copro, Simba)}
