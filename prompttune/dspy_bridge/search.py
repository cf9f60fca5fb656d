"""A DSPy optimizer as one more search behind prompttune's engine: same ledger, cache view, verdict
and run record as prompttune's own strategies.

It compiles a `dspy.Predict` classification program with DSPy's own optimizer, set up as
`prompttune.dspy_bridge.optimizers` says (DSPy's recommended settings, the rest sized to the cap).
Every LM call DSPy makes — bootstrapping, proposals, reflections, evaluations — reaches the model
through `MeteredEngine`, on the run's search ledger, which enforces the cap. When the cap is
reached mid-compile, `BudgetStop` ends DSPy, and the search keeps the best program scored on the
whole set DSPy chooses on (its valset; SIMBA's trainset) so far — DSPy's own choice rule — else the
baseline. The chosen program becomes a PromptSpec: the engine's held-out verdict decides whether
it ships.
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterator

import dspy
import numpy as np

from prompttune.core.storage import TrialStorage
from prompttune.core.types import Example, Record
from prompttune.dspy_bridge.adapter import EvaluationPrefetch, PromptSpecAdapter
from prompttune.dspy_bridge.arm import DspyArm, Sizes, Tools
from prompttune.dspy_bridge.engine import BudgetStop, MeteredEngine
from prompttune.dspy_bridge.optimizers import DSPY_OPTIMIZERS
from prompttune.dspy_bridge.program import ProgramMapping
from prompttune.optimizers.proposer import Proposer
from prompttune.optimizers.strategy_contract import spec_candidate
from prompttune.results.search_outcome import SearchOutcome
from prompttune.scoring.evaluator import Evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.search_spaces import Candidate
from prompttune.search_spaces.prompt import PromptSpec


def dspy_settings(name: str, cap: int, sizes: Sizes, options: dict[str, Any]) -> DspyArm:
    """The arm's settings for this cap; a `UserError` before any model call when its smallest run
    does not fit the cap or its options are bad."""
    return DSPY_OPTIMIZERS[name](cap, sizes, options)


class SelectionTracker:
    """Watches the scored examples and notes each program once the whole set DSPy chooses on has
    been scored: the anytime curve, the trial log, and the fallback choice on a budget stop."""

    def __init__(self, selection_ids: list[str], ledger: BudgetLedger, storage: TrialStorage) -> None:
        self.selection_ids = set(selection_ids)
        self.ledger = ledger
        self.storage = storage
        self.seen: dict[PromptSpec, dict[str, bool]] = {}
        self.scores: dict[PromptSpec, float] = {}
        self.best: tuple[PromptSpec, float] | None = None
        self.anytime: list[tuple[int, float]] = []
        self.leaders: list[tuple[int, int, PromptSpec]] = []  # (calls, tokens, spec) where each best took over

    def observe(self, spec: PromptSpec, record: Record) -> None:
        if record.example_id not in self.selection_ids or spec in self.scores:
            return
        seen = self.seen.setdefault(spec, {})
        seen[record.example_id] = record.correct
        if len(seen) < len(self.selection_ids):
            return
        score = sum(seen.values()) / len(seen)
        self.scores[spec] = score
        if self.best is None or score > self.best[1]:
            self.best = (spec, score)
            self.leaders.append((self.ledger.calls, self.ledger.tokens, spec))
        self.anytime.append((self.ledger.calls, self.best[1]))
        self.storage.append({"number": len(self.scores) - 1, "purpose": "full selection set", "n": len(seen),
                             "accuracy": score, "instruction": spec.instruction,
                             "demo_ids": list(spec.demo_ids), "spec": asdict(spec), "budget_spent": self.ledger.calls,
                             "tokens_spent": self.ledger.tokens, "best_so_far": self.best[1]})


@contextlib.contextmanager
def dspy_output_to(path: Path | None) -> Iterator[None]:
    """DSPy prints, draws progress bars and logs every trial: keep all that in `path` (discarded
    when the run writes no directory)."""
    logger = logging.getLogger("dspy")
    saved = logger.handlers[:], logger.propagate
    with (open(path, "a", encoding="utf-8") if path else open("/dev/null", "w")) as log, \
            contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        logger.handlers, logger.propagate = [logging.StreamHandler(log)], False
        try:
            yield
        finally:
            logger.handlers, logger.propagate = saved


class DspySearch:
    """One DSPy compile as a search: `search()` returns the outcome the engine's verdict judges."""

    def __init__(self, settings: DspyArm, baseline: Candidate, evaluator: Evaluator, input_fields: list[str],
                 train: list[Example], dev: list[Example], seed: int, model: str, log: Path | None,
                 proposer: Proposer | None = None) -> None:
        self.settings, self.baseline, self.evaluator, self.seed, self.log = settings, baseline, evaluator, seed, log
        self.proposer = proposer  # writes DSPy's proposals and reflections (default: the task model)
        self.mapping = ProgramMapping.build(baseline.spec, input_fields, train, dev)
        rng = np.random.default_rng(seed)
        self.trainset = [self.mapping.example(train[i]) for i in rng.permutation(len(train))]
        self.valset = [self.mapping.example(dev[i]) for i in rng.permutation(len(dev))[:settings.valset_size]]
        self.model = model
        self.visible = {ex.id: ex for ex in [*train, *dev]}
        self.engine: MeteredEngine | None = None  # the compile's metered engine, once it ran (for inspection)

    def search(self, storage: TrialStorage) -> SearchOutcome:
        ledger = self.evaluator.ledger
        selection = self.settings.selection(self.trainset, self.valset)
        tracker = SelectionTracker([self.mapping.example_id(ex.inputs()) for ex in selection], ledger, storage)
        self.engine = engine = MeteredEngine(self.evaluator, tracker.observe, seed=self.seed,
                                             threads=self.settings.options.threads, proposer=self.proposer)
        lm = dspy.LM(f"prompttune/{self.model}", engine=engine, cache=False, num_retries=0, max_tokens=96)
        adapter = PromptSpecAdapter(self.mapping, engine)
        tools = Tools(lm, adapter, engine, self.mapping, self.seed, self.trainset, self.valset)
        program = None
        # One thread asks in order, one request at a time (as DSPy does unbatched); more get their
        # evaluations paid for in order, whole where the cap allows.
        prefetch = [EvaluationPrefetch(self.mapping, engine)] if engine.threads > 1 else []
        with dspy.context(lm=lm, adapter=adapter, callbacks=[*dspy.settings.get("callbacks", []), *prefetch]), \
                dspy_output_to(self.log):
            try:
                program = self.settings.compile(self.mapping.program(self.baseline.spec, []), tools)
            except BudgetStop:
                pass
        if program is not None:
            chosen, how = self.mapping.spec_of(program), "DSPy's compiled program"
        elif tracker.best is not None:
            chosen, how = tracker.best[0], "stopped by the cap: best program scored on the whole selection set so far"
        else:
            chosen, how = (self.baseline.spec, "stopped by the cap before any program was scored on the whole "
                                               "selection set: baseline")
        best = self.baseline if chosen == self.baseline.spec else spec_candidate(chosen, self.settings.name)
        dev_score = tracker.scores.get(chosen, math.nan)
        baseline_score = tracker.scores.get(self.baseline.spec, math.nan)
        notes = [self.settings.description, f"Dev winner: {how}.",
                 f"{len(tracker.scores)} programs scored on the whole selection set ({len(selection)} examples); "
                 f"{engine.samples} sampled generations asked for, each charged unless cached."]
        n = len(selection)
        return SearchOutcome(
            ranking=[best], family=max(len(tracker.scores), 1),
            leader_dev_score=dev_score, leader_dev_n=n if not math.isnan(dev_score) else 0,
            baseline_dev_score=baseline_score, baseline_dev_n=n if not math.isnan(baseline_score) else 0,
            n_trials=len(tracker.scores), n_candidates=len(tracker.scores), stopped_by_budget=program is None,
            anytime=tracker.anytime, notes=notes, leaders=tracker.leaders)

    def save_program(self, spec: PromptSpec, path: Path) -> None:
        """The shipped prompt as DSPy's own saved program (what `dspy.Predict.load` reads)."""
        self.mapping.program(spec, [self.visible[i] for i in spec.demo_ids]).save(str(path))
