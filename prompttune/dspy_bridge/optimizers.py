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

Here: the arms by name (`DSPY_OPTIMIZERS`), BootstrapFewShotWithRandomSearch, COPRO and SIMBA; MIPROv2 and
GEPA in miprov2.py and gepa.py; the contract they keep in arm.py.
"""

from __future__ import annotations

import dspy
from pydantic import Field

from prompttune.core.errors import UserError
from prompttune.dspy_bridge.arm import DSPY_TRIES_PER_DEMO, DspyArm, DspyOptions, Tools, ValsetOptions, exact_label
from prompttune.dspy_bridge.gepa import Gepa
from prompttune.dspy_bridge.miprov2 import MiproV2


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


DSPY_OPTIMIZERS: dict[str, type[DspyArm]] = {arm.name: arm for arm in (MiproV2, Bfrs, Gepa, Copro, Simba)}
