"""MIPROv2 as a compared arm: auto=None with as many candidates as its estimated calls under the cap allow
(its `auto` presets as options, not sized), and the model of its trials' calls that sizing rests on."""

from __future__ import annotations

import math
from typing import Literal

import dspy
from dspy.teleprompt.mipro_optimizer_v2 import (
    AUTO_RUN_SETTINGS,
    BOOTSTRAPPED_FEWSHOT_EXAMPLES_IN_CONTEXT,
    MIN_MINIBATCH_SIZE,
)
from pydantic import Field

from prompttune.core.errors import UserError
from prompttune.dspy_bridge.arm import DSPY_TRIES_PER_DEMO, DspyArm, Tools, ValsetOptions, exact_label

SUMMARY_CALLS = 11  # MIPROv2's dataset summary: at most 10 observation calls and one summary


class MiproV2Options(ValsetOptions):
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


class MiproV2(DspyArm):
    """MIPROv2 with auto=None: as many candidates as the cap pays for, with MIPROv2's recommended
    trials; its `auto` presets on request. Proposals are sampled at DSPy's temperature 1.0."""

    name = "dspy-mipro"
    Options = MiproV2Options
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
