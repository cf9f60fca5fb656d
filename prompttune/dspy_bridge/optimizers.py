"""DSPy's optimizers as compared arms: their options, their settings under a call cap, their compile call.

DSPy counts no model calls, so each arm keeps the settings DSPy's own documentation and defaults
recommend and sizes to the cap what DSPy leaves to the user, so that the default plan spends the
cap: MIPROv2 runs with auto=None and as many candidates as its estimated calls allow (its `auto`
presets stay available as options, not sized), BootstrapFewShotWithRandomSearch as many random
programs as fit, GEPA until the cap cannot pay for another iteration, COPRO the breadth and depth
that spend most with at least two rounds, SIMBA as many steps as surely fit (see `Simba`: its
spend cannot be sized to the cap). The metered engine's ledger still enforces the cap; an arm
whose smallest useful run cannot fit it says so in one line before any model call. Every arm
draws its valset from the dev split with the arm seed (MIPROv2's light mode validates on 100
examples; GEPA asks for the smallest valset that represents the task), so `valset_size` defaults
to 100 for all of them.

Settings are plain numbers computed from (cap, split sizes, options), so `compare` can check
them before it loads a model; `compile` then runs DSPy with them on the arm's `Tools`, with DSPy's
num_threads set to the engine's `threads` (the engine batches their calls).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Sequence

import dspy
from dspy.teleprompt.gepa import InstructionProposer
from dspy.teleprompt.mipro_optimizer_v2 import (
    AUTO_RUN_SETTINGS,
    BOOTSTRAPPED_FEWSHOT_EXAMPLES_IN_CONTEXT,
    MIN_MINIBATCH_SIZE,
)
from pydantic import Field

from prompttune.core.errors import UserError
from prompttune.core.types import Record
from prompttune.dspy_bridge.engine import BudgetStop, MeteredEngine
from prompttune.dspy_bridge.program import OUTPUT_FIELD, ProgramMapping
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.optimizers.contract import OptimizerOptions, validate_options

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

    @property
    def threads(self) -> int:
        """DSPy's num_threads for this run: the metered engine gathers its threads' calls into batches."""
        return self.engine.threads


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

    def compile(self, student: dspy.Predict, tools: Tools) -> dspy.Module:
        """Run DSPy's optimizer with `tools.threads` threads; its calls go through `tools.lm` (and so
        the ledger). On `BudgetStop` the engine is halted first: DSPy leaves the worker threads of a
        parallel evaluation running when one of them raises, and they must not reach the model
        after the arm has moved on."""
        with dspy.context(num_threads=tools.threads):
            try:
                return self._compile(student, tools)
            except BudgetStop:
                tools.engine.halt()
                raise

    @abstractmethod
    def _compile(self, student: dspy.Predict, tools: Tools) -> dspy.Module:
        """DSPy's optimizer, set up and compiled."""

    def selection(self, trainset: list[dspy.Example], valset: list[dspy.Example]) -> list[dspy.Example]:
        """The examples the optimizer scores whole programs on to choose one: its valset."""
        return valset


class DspyOptions(OptimizerOptions):
    threads: int = Field(32, ge=1, description="DSPy's num_threads; the metered engine gathers their calls into "
                                               "batches for the model (same answers and charges as one thread)")


class ValsetOptions(DspyOptions):
    valset_size: int = Field(100, ge=1, description="dev examples drawn with the arm seed as DSPy's valset")


class MiproOptions(ValsetOptions):
    auto: Literal["light", "medium", "heavy"] | None = Field(
        None, description="null (default): num_candidates and num_trials sized to the cap; light, medium or "
                          "heavy: MIPROv2's preset as DSPy defines it, whatever the cap")
    num_candidates: int | None = Field(None, ge=2, description="with auto=null: demo sets and instructions "
                                                               "(default: sized to the cap)")
    num_trials: int | None = Field(None, ge=1, description="with auto=null: Bayesian-optimization trials "
                                                           "(default: MIPROv2's rule for num_candidates)")
    max_demos: int = Field(4, ge=0, description="bootstrapped and labeled demos per program (DSPy's 4)")
    minibatch_size: int = Field(35, ge=1, description="valset examples a trial is scored on (DSPy's 35)")
    minibatch_full_eval_steps: int = Field(5, ge=1, description="trials between full-valset scorings")
    program_aware_proposer: bool = Field(False, description="show the proposer DSPy's module source code")


def _recommended_trials(candidates: int, zero_shot: bool) -> int:
    """MIPROv2's own rule for num_trials, for one predictor (instructions, and demos unless zero-shot)."""
    variables = 1 if zero_shot else 2
    return int(max(2 * variables * math.log2(candidates), 1.5 * candidates))


def _trial_calls(combos: int, trials: int, val: int, batch: int, steps: int) -> float:
    """The expected calls of MIPROv2's trials and full evaluations when each trial draws one of
    `combos` programs at random, with a fresh minibatch: examples a program was scored on before
    are cache hits. A full evaluation (after every `steps` trials and after the last) scores a
    program tried on a minibatch on the rest of the valset; later trials of it are all cache hits."""
    left, covered, calls = combos, 0.0, 0.0  # programs not fully scored, the share of the valset each has had
    for trial in range(1, trials + 1):
        share = batch / val / combos  # expected share of the valset a trial adds to each program
        calls += left * (1 - covered) * share * val
        covered += (1 - covered) * share
        if (trial % steps == 0 or trial == trials) and left:
            calls += (1 - covered) * (1 - batch / val) * val  # it was tried on one minibatch more than most
            left -= 1
    return calls


class Mipro(DspyArm):
    """MIPROv2 with auto=None: as many candidates as the cap pays for, with MIPROv2's recommended
    trials; its `auto` presets on request. Proposals are sampled at DSPy's temperature 1.0."""

    name = "dspy-mipro"
    Options = MiproOptions
    MOST_CANDIDATES = 200  # a bound on the search for the plan, far above what any cap here pays for
    # The trials fill the estimate to this multiple of the cap: on the embedded model MIPROv2 spent 85-97%
    # of its estimate (fewer bootstrap tries, TPE drawing the programs it likes again: cache hits), so a
    # plan sized to the cap itself stopped under 90% of it; one sized past it is stopped by the cap.
    REACH = 1.1

    def _estimate(self, sets: int, instructions: int, trials: int) -> int:
        """MIPROv2's calls, by its own steps: demo sets bootstrapped (the zero-shot, labeled-only
        and — zero-shot runs — one more set need none; about two tries per demo kept), the
        dataset summary and one proposal per instruction, the default program on the valset, each
        trial on a minibatch (or the valset), and a full-valset scoring after every
        `minibatch_full_eval_steps` trials and after the last, each paying only for the valset
        examples outside the minibatch that chose the program (those are cache hits)."""
        o = self.options
        demos = o.max_demos or BOOTSTRAPPED_FEWSHOT_EXAMPLES_IN_CONTEXT  # zero-shot: demos inform the proposer
        bootstrapped = sets - (1 if o.max_demos == 0 else 2)
        bootstrap = max(bootstrapped, 0) * DSPY_TRIES_PER_DEMO * demos
        proposals = SUMMARY_CALLS + 2 * o.program_aware_proposer + instructions
        val, batch = self.valset_size, self.batch
        if not self.minibatch:
            return bootstrap + proposals + val + trials * val
        combos = instructions * (1 if o.max_demos == 0 else sets)
        return bootstrap + proposals + val + round(_trial_calls(combos, trials, val, batch,
                                                                o.minibatch_full_eval_steps))

    def _size(self, zero_shot: bool) -> tuple[int, int]:
        """num_candidates and num_trials for the cap: the most candidates whose run, with MIPROv2's
        recommended trials, fits it, then more trials until the estimate reaches `REACH` × the cap.
        (Candidates come first: more trials on fewer candidates buy ever fewer new scores, as TPE
        draws the programs it likes again and their examples are cache hits.)"""
        def estimate(n: int) -> int:
            return self._estimate(n, n, _recommended_trials(n, zero_shot))

        self._require(estimate(2), f"2 candidates and {_recommended_trials(2, zero_shot)} trials on a "
                                   f"{self.valset_size}-example valset")
        n = 2
        while n < self.MOST_CANDIDATES and estimate(n + 1) <= self.cap:
            n += 1
        trials = _recommended_trials(n, zero_shot)
        calls = self._estimate(n, n, trials)
        # ... while a trial still adds calls: once every program is fully scored, more trials add none.
        while calls < (more := self._estimate(n, n, trials + 1)) <= self.REACH * self.cap:
            trials, calls = trials + 1, more
        return n, trials

    def _settle(self) -> str:
        o = self.options
        zero_shot = o.max_demos == 0
        if o.auto is not None:
            if o.num_candidates is not None or o.num_trials is not None:
                raise UserError(f"dspy-mipro: auto={o.auto} sets num_candidates and num_trials itself; "
                                "pass auto=null to set them")
            sets = AUTO_RUN_SETTINGS[o.auto]["n"]
            instructions = sets if zero_shot else sets // 2
            trials = _recommended_trials(sets, zero_shot)
            # A larger valset would be cut by MIPROv2 itself, to a sample the arm could not follow.
            self.valset_size = min(AUTO_RUN_SETTINGS[o.auto]["val_size"], self.valset_size)
            self.minibatch = self.valset_size > MIN_MINIBATCH_SIZE
        else:
            self.minibatch = o.minibatch_size < self.valset_size
        self.batch = min(o.minibatch_size, self.valset_size)
        val = self.valset_size
        if o.auto is not None:
            plan = (f"MIPROv2's preset auto='{o.auto}', chosen by option (not sized to the cap; DSPy's default "
                    f"mode is 'light'): {trials} trials (MIPROv2's rule)")
        elif o.num_candidates is not None or o.num_trials is not None:
            if o.num_candidates is None or o.num_trials is None:
                raise UserError("dspy-mipro: auto=null takes both num_candidates and num_trials, or neither "
                                "(both sized to the cap)")
            sets = instructions = o.num_candidates
            trials = o.num_trials
            plan = (f"MIPROv2 auto=None with the given num_candidates={sets}, num_trials={trials} "
                    f"(MIPROv2's rule: {_recommended_trials(sets, zero_shot)})")
        else:
            sets, trials = self._size(zero_shot)
            instructions = sets
            rule = _recommended_trials(sets, zero_shot)
            more = "" if trials == rule else f", plus {trials - rule} that fill the estimate to {self.REACH:g}× the cap"
            most = " (prompttune's most)" if sets == self.MOST_CANDIDATES else ""
            plan = (f"MIPROv2 auto=None sized to the cap: num_candidates={sets}{most}, the most whose run fits the cap "
                    f"with MIPROv2's recommended {rule} trials{more}: num_trials={trials}; DSPy's presets are "
                    f"options (auto: light, medium or heavy), not sized to the cap")
        self.num_candidates, self.num_trials = (None, None) if o.auto is not None else (sets, trials)
        estimate = self._estimate(sets, instructions, trials)
        batches = f"minibatches of {self.batch}, full valset every {o.minibatch_full_eval_steps} trials" \
            if self.minibatch else "no minibatches"
        demos = ("zero-shot (demo sets bootstrapped only to inform the proposer)" if zero_shot
                 else f"{sets} demo sets, ≤ {o.max_demos} bootstrapped + {o.max_demos} labeled demos each")
        return (f"{plan}: {demos}, {instructions} proposed instructions, valset {val} dev examples drawn with the "
                f"arm seed, {batches}, proposals sampled at temperature 1.0 with seeds from the arm seed (each "
                f"sample charged), program-aware proposer "
                f"{'on' if o.program_aware_proposer else 'off (its prompts hold DSPy source code)'}; "
                f"estimated {estimate} calls for a cap of {self.cap} (examples a program was scored on before "
                f"are cache hits; the estimate takes TPE's draws of programs as random)"
                f"{'' if estimate <= self.cap else ': past the cap, which stops it near its end'}.")

    def _compile(self, student: dspy.Predict, tools: Tools) -> dspy.Module:
        o = self.options
        optimizer = dspy.MIPROv2(metric=exact_label, prompt_model=tools.lm, task_model=tools.lm, auto=o.auto,
                                 num_candidates=self.num_candidates, max_bootstrapped_demos=o.max_demos,
                                 max_labeled_demos=o.max_demos, num_threads=tools.threads, seed=tools.seed,
                                 verbose=False)
        return optimizer.compile(student, trainset=tools.trainset, valset=tools.valset,
                                 num_trials=self.num_trials, minibatch=self.minibatch,
                                 minibatch_size=min(o.minibatch_size, len(tools.valset)),
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

    def _compile(self, student: dspy.Predict, tools: Tools) -> dspy.Module:
        optimizer = dspy.BootstrapFewShotWithRandomSearch(
            metric=exact_label, max_bootstrapped_demos=self.options.max_demos, max_labeled_demos=self.labeled,
            num_candidate_programs=self.candidates, num_threads=tools.threads)
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


class CoproOptions(ValsetOptions):
    breadth: int | None = Field(None, ge=2, description="instructions per round (default: sized to the cap, "
                                                         "up to DSPy's 10)")
    depth: int | None = Field(None, ge=1, description="rounds (default: sized to the cap, up to DSPy's 3)")
    init_temperature: float = Field(1.4, gt=0, le=2, description="proposal temperature (DSPy's 1.4)")


class Copro(DspyArm):
    """COPRO: the breadth and depth (up to DSPy's 10 and 3) that spend most of the cap, at least
    two rounds where they fit: at depth 1 COPRO only samples and scores, it never refines."""

    name = "dspy-copro"
    Options = CoproOptions
    DSPY_BREADTH, DSPY_DEPTH = 10, 3

    def _cost(self, breadth: int, depth: int) -> int:
        """breadth - 1 samples, then breadth per later round; every candidate scored on the valset."""
        return breadth - 1 + (depth - 1) * breadth + depth * breadth * self.valset_size

    def _settle(self) -> str:
        o = self.options
        breadths = [o.breadth] if o.breadth else range(2, self.DSPY_BREADTH + 1)
        depths = [o.depth] if o.depth else range(1, self.DSPY_DEPTH + 1)
        smallest = (min(breadths), min(depths))
        self._require(self._cost(*smallest), f"breadth {smallest[0]}, depth {smallest[1]} on a "
                                             f"{self.valset_size}-example valset")
        plans = [(b, d) for b in breadths for d in depths if self._cost(b, d) <= self.cap]
        # Refining plans first, then the most calls, then the wider one.
        self.breadth, self.depth = max(plans, key=lambda p: (p[1] >= 2, self._cost(*p), p[0]))
        given = {"breadth": o.breadth, "depth": o.depth}
        sized = ", ".join(k for k, v in given.items() if v is None)
        how = (f"{sized} sized to the cap: the plan, up to DSPy's {self.DSPY_BREADTH} and {self.DSPY_DEPTH}, "
               f"that spends most with depth ≥ 2 where that fits" if sized else "as given")
        refine = "" if self.depth >= 2 else " At depth 1 COPRO samples and scores its candidates but refines none."
        return (f"COPRO: breadth={self.breadth}, depth={self.depth} ({how}), "
                f"instructions sampled at temperature {o.init_temperature} with seeds from the arm seed (each "
                f"sample charged), every candidate scored on a valset of {self.valset_size} dev examples drawn "
                f"with the arm seed; at most {self._cost(self.breadth, self.depth)} calls for a cap of {self.cap}. "
                f"COPRO's proposed output prefixes are not part of prompttune's rendering and are dropped.{refine}")

    def _compile(self, student: dspy.Predict, tools: Tools) -> dspy.Module:
        optimizer = dspy.COPRO(prompt_model=tools.lm, metric=exact_label, breadth=self.breadth, depth=self.depth,
                               init_temperature=self.options.init_temperature)
        return optimizer.compile(student, trainset=tools.valset,
                                 eval_kwargs={"num_threads": tools.threads, "display_progress": False})


class SimbaOptions(DspyOptions):
    trainset_size: int = Field(100, ge=1, description="train examples SIMBA samples from and validates on")
    bsize: int = Field(32, ge=1, description="mini-batch size (DSPy's 32)")
    num_candidates: int = Field(6, ge=1, description="new programs per step (DSPy's 6)")
    max_steps: int | None = Field(None, ge=1, description="steps (default: DSPy's 8, fewer if the cap says so)")
    max_demos: int = Field(4, ge=0, description="demos a program may hold (DSPy's 4)")


class Simba(DspyArm):
    """SIMBA: DSPy's batch size and candidates, as many of its 8 steps as surely fit the cap."""

    name = "dspy-simba"
    Options = SimbaOptions
    DSPY_STEPS = 8

    def _cost(self, steps: int) -> int:
        """At most: each step's trajectories (the seed program alone at first — label scoring is
        deterministic, so its resamples on one example are one query — then up to num_candidates
        programs), its new programs on the batch with an advice call each (and a JSON retry), then
        the final scoring of up to num_candidates + 1 winners on the trainset, less the batch each
        was scored on in its step (cache hits)."""
        o = self.options
        candidates = (o.num_candidates + 1) * (o.bsize + 2)
        trajectories = o.bsize + (steps - 1) * o.num_candidates * o.bsize
        return trajectories + steps * candidates + (min(steps, o.num_candidates) + 1) * (self.trainset_size - o.bsize)

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
        sized = "given" if o.max_steps else "DSPy's 8, cut until the most the steps can cost fits the cap"
        held = (" Zero-shot, SIMBA can only append rules, and it writes a rule only from two samples of one "
                "program that score differently: with deterministic labels it writes none, and spends little "
                "beyond scoring the seed program.") if o.max_demos == 0 else ""
        return (f"SIMBA: max_steps={self.steps} ({sized}), bsize={o.bsize}, "
                f"num_candidates={o.num_candidates}, max_demos={o.max_demos} (DSPy: 32, 6, 4); SIMBA takes no "
                f"valset: it samples mini-batches from and validates on {self.trainset_size} train examples drawn "
                f"with the arm seed. prompttune scores labels deterministically, so SIMBA's temperature-1.0 "
                f"resampling of one program gives one answer: its variation comes from sampling among "
                f"programs. At most {self._cost(self.steps)} calls for a cap of {self.cap}; a step usually costs "
                f"well under its most (its samples and candidates often coincide with programs already scored, "
                f"and how often only the scores decide), so SIMBA may leave much of the cap unspent. Sizing it "
                f"to a typical step instead would let the cap stop it before its final validation, the only "
                f"scoring of whole programs on its trainset, and the arm would ship the baseline.{held}")

    def _compile(self, student: dspy.Predict, tools: Tools) -> dspy.Module:
        o = self.options
        optimizer = dspy.SIMBA(metric=exact_label, bsize=o.bsize, num_candidates=o.num_candidates,
                               max_steps=self.steps, max_demos=o.max_demos, prompt_model=tools.lm, num_threads=tools.threads)
        return optimizer.compile(student, trainset=self.selection(tools.trainset, tools.valset), seed=tools.seed)

    def selection(self, trainset: list[dspy.Example], valset: list[dspy.Example]) -> list[dspy.Example]:
        return trainset[:self.trainset_size]


DSPY_OPTIMIZERS: dict[str, type[DspyArm]] = {arm.name: arm for arm in (Mipro, Bfrs, Gepa, Copro, Simba)}
