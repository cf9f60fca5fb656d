"""DSPy's optimizers as compared arms: same splits, same cap, same model, same verdict.

Each arm compiles a `dspy.Predict` classification program with DSPy's own optimizer, set up as
`prompttune.dspy_bridge.optimizers` says (DSPy's recommended settings, the rest sized to the
cap). Every LM call DSPy makes — bootstrapping, proposals, reflections, evaluations — reaches the
model through `MeteredEngine`, on this arm's ledger, which enforces the cap. When it is reached
mid-compile, `BudgetStop` ends DSPy, and the arm keeps the best program scored on the whole set
DSPy chooses on (its valset; SIMBA's trainset) so far — DSPy's own choice rule — else the
baseline. The chosen program becomes a PromptSpec and goes through the same held-out verdict as
every other arm's dev winner: it ships only if confirmed, else the baseline ships.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Iterator

import dspy
import numpy as np

from prompttune.compare.arms import ArmRun, Bench
from prompttune.core.storage import JsonlStorage, set_aside_trials
from prompttune.core.types import Record
from prompttune.dspy_bridge.adapter import PromptSpecAdapter
from prompttune.dspy_bridge.engine import BudgetStop, MeteredEngine
from prompttune.dspy_bridge.optimizers import DSPY_OPTIMIZERS, Sizes, Tools
from prompttune.dspy_bridge.program import ProgramMapping
from prompttune.evaluation.confirmation import Verdict, held_out_verdict
from prompttune.evaluation.evaluator import Evaluator
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.evaluation.metered_cache import MeteredCache
from prompttune.optimizers.base import spec_candidate
from prompttune.search_spaces import Candidate
from prompttune.search_spaces.prompt import PromptSpec


class SelectionTracker:
    """Watches the arm's scored examples and notes each program once the whole set DSPy chooses
    on has been scored: the anytime curve, the trial log, and the fallback choice on a budget stop."""

    def __init__(self, selection_ids: list[str], ledger: BudgetLedger, storage: JsonlStorage) -> None:
        self.selection_ids = set(selection_ids)
        self.ledger = ledger
        self.storage = storage
        self.seen: dict[PromptSpec, dict[str, bool]] = {}
        self.scores: dict[PromptSpec, float] = {}
        self.best: tuple[PromptSpec, float] | None = None
        self.anytime: list[tuple[int, float]] = []

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
        self.anytime.append((self.ledger.calls, self.best[1]))
        self.storage.append({"number": len(self.scores) - 1, "purpose": "full selection set", "n": len(seen),
                             "accuracy": score, "instruction": spec.instruction,
                             "demo_ids": list(spec.demo_ids), "budget_spent": self.ledger.calls,
                             "tokens_spent": self.ledger.tokens, "best_so_far": self.best[1]})


@contextlib.contextmanager
def _dspy_output_to(path: Path) -> Iterator[None]:
    """DSPy prints, draws progress bars and logs every trial; keep all that in the arm's folder."""
    logger = logging.getLogger("dspy")
    saved = logger.handlers[:], logger.propagate
    with (open(path, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log),
          contextlib.redirect_stderr(log)):
        handler = logging.StreamHandler(log)
        logger.handlers, logger.propagate = [handler], False
        try:
            yield
        finally:
            logger.handlers, logger.propagate = saved


def _choose(program: dspy.Module | None, tracker: SelectionTracker, mapping: ProgramMapping,
            baseline: PromptSpec) -> tuple[PromptSpec, str]:
    if program is not None:
        return mapping.spec_of(program), "DSPy's compiled program"
    if tracker.best is not None:
        return tracker.best[0], "stopped by the cap: best program scored on the whole selection set so far"
    return baseline, "stopped by the cap before any program was scored on the whole selection set: baseline"


def _verdict(bench: Bench, baseline: Candidate, best: Candidate, seed: int) -> tuple[Verdict, BudgetLedger]:
    """The held-out verdict, through the same kind of cache view and ledger as a prompttune run's."""
    test = bench.task.splits["test"]
    ledger = BudgetLedger()
    evaluator = Evaluator(bench.backend, {ex.id: ex for ex in test}, {ex.id: ex for ex in bench.task.splits["train"]},
                          MeteredCache(bench.shared), ledger, scoring=bench.config.scoring)
    bench.console.print(f"confirming baseline and the DSPy program on {len(test)} held-out test examples…")
    verdict = held_out_verdict(baseline, [best], evaluator, [ex.id for ex in test], bench.config.alpha,
                               seed=seed)
    return verdict, ledger


def run_dspy_arm(bench: Bench, arm: str, seed: int) -> ArmRun:
    started = time.time()
    config = bench.arm_config(arm, seed)
    task = bench.task
    train, dev = task.splits["train"], task.splits["dev"]
    # Settings first: an arm the cap cannot pay for stops here, before any model call.
    settings = DSPY_OPTIMIZERS[arm](config.budget, Sizes(len(train), len(dev)), config.optimizer_options)
    run_dir = bench.arms_dir / f"{arm}-s{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    set_aside_trials(run_dir)  # an arm an interrupted comparison left unfinished compiles again from the start
    (run_dir / "config.json").write_text(config.model_dump_json(indent=2))
    visible = {ex.id: ex for ex in [*train, *dev]}

    ledger = BudgetLedger(cap_calls=config.budget, cap_tokens=config.budget_tokens)
    search_view = MeteredCache(bench.shared)
    evaluator = Evaluator(bench.backend, visible, {ex.id: ex for ex in train}, search_view, ledger,
                          scoring=config.scoring)
    baseline = bench.space.default_candidate()
    mapping = ProgramMapping.build(baseline.spec, task.input_fields, train, dev)
    rng = np.random.default_rng(seed)
    trainset = [mapping.example(train[i]) for i in rng.permutation(len(train))]
    valset = [mapping.example(dev[i]) for i in rng.permutation(len(dev))[:settings.valset_size]]
    selection = settings.selection(trainset, valset)
    tracker = SelectionTracker([mapping.example_id(ex.inputs()) for ex in selection], ledger,
                               JsonlStorage(run_dir / "trials.jsonl"))
    engine = MeteredEngine(evaluator, tracker.observe, seed=seed)
    lm = dspy.LM(f"prompttune/{config.model}", engine=engine, cache=False, num_retries=0, max_tokens=96)
    adapter = PromptSpecAdapter(mapping, engine)
    tools = Tools(lm, adapter, engine, mapping, seed, trainset, valset)

    start = bench.backend.mark()
    bench.console.print(f"{arm} seed {seed}: DSPy compiling (its output goes to {run_dir / 'dspy.log'})…")
    program = None
    with dspy.context(lm=lm, adapter=adapter, num_threads=1), _dspy_output_to(run_dir / "dspy.log"):
        try:
            program = settings.compile(mapping.program(baseline.spec, []), tools)
        except BudgetStop:
            pass
    stop = bench.backend.mark()
    bench.console.print(f"{arm} seed {seed}: {settings.description}")
    chosen, how = _choose(program, tracker, mapping, baseline.spec)
    best = baseline if chosen == baseline.spec else spec_candidate(chosen, arm)
    verdict, confirm_ledger = _verdict(bench, baseline, best, seed)
    shipped = verdict.shipped.spec

    (run_dir / "best_prompt.json").write_text(json.dumps(
        {"candidate_id": verdict.shipped.id, "spec": asdict(shipped), "verdict": verdict.summary(),
         "is_baseline": verdict.shipped.id == baseline.id, "dev_winner_chosen_by": how,
         "plan": settings.description},
        indent=2, ensure_ascii=False))
    (run_dir / "dev_winner.json").write_text(json.dumps(
        {"candidate_id": best.id, "spec": asdict(chosen), "chosen_by": how,
         "label": "dev winner: ships only if the held-out verdict confirms it"}, indent=2, ensure_ascii=False))
    mapping.program(shipped, [visible[i] for i in shipped.demo_ids]).save(str(run_dir / "dspy_program.json"))
    notes = [settings.description, f"Dev winner: {how}.", f"Verdict: {verdict.summary()}.",
             f"{len(tracker.scores)} programs scored on the whole selection set ({len(selection)} examples); "
             f"{engine.samples} sampled generations asked for, each charged unless cached."]
    return ArmRun(arm, seed, run_dir, baseline.spec, shipped, tracker.scores.get(chosen),
                  verdict.shipped_confirmation, chosen, verdict.leader_confirmation, bench.space.fingerprint(), ledger,
                  confirm_ledger.calls, search_view.foreign_calls, search_view.foreign_tokens, tracker.anytime,
                  program is None, time.time() - started, notes, bench.backend.served(start, stop), verdict.test_ids)
