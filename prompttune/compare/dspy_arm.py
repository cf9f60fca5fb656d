"""DSPy's optimizers as compared arms: same splits, same cap, same model, same verdict.

Each arm compiles a `dspy.Predict` classification program with DSPy's own optimizer. Every LM
call DSPy makes — bootstrapping, instruction proposals, evaluations — reaches the model through
`MeteredEngine`, on this arm's ledger. DSPy has no call budget of its own, so its settings are
derived from the cap (`Plan.description` says how); the ledger still enforces the cap. When it
is reached mid-compile, `BudgetStop` ends DSPy, and the arm keeps the best program that was
scored on the whole dev split so far (DSPy's own choice rule), else the baseline. The chosen
program becomes a PromptSpec and goes through the same held-out verdict as every other arm's
dev winner: it ships only if confirmed, else the baseline ships.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

import dspy
import numpy as np

from prompttune.compare.arms import ArmRun, Bench
from prompttune.core.storage import JsonlStorage, set_aside_trials
from prompttune.core.types import Record
from prompttune.dspy_bridge.adapter import PromptSpecAdapter
from prompttune.dspy_bridge.engine import BudgetStop, MeteredEngine
from prompttune.dspy_bridge.program import OUTPUT_FIELD, ProgramMapping
from prompttune.evaluation.confirmation import Verdict, held_out_verdict
from prompttune.evaluation.evaluator import Evaluator
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.evaluation.metered_cache import MeteredCache
from prompttune.optimizers.base import spec_candidate
from prompttune.search_spaces import Candidate
from prompttune.search_spaces.prompt import PromptSpec

MIPRO_MODES = (("heavy", 18), ("medium", 12), ("light", 6))  # DSPy's auto modes: candidates per mode
SUMMARY_CALLS = 11  # MIPROv2's dataset summary: at most 10 observation calls and one summary


def exact_label(example: dspy.Example, prediction: dspy.Prediction, trace: Any = None) -> bool:
    return getattr(prediction, OUTPUT_FIELD) == getattr(example, OUTPUT_FIELD)


@dataclass
class Plan:
    optimizer: Any
    compile_kwargs: dict[str, Any]
    description: str


def _recommended_trials(n: int) -> int:
    """MIPROv2's own rule for num_trials, for one predictor with instructions and demos."""
    return int(max(2 * 2 * math.log2(n), 1.5 * n))


def mipro_plan(lm: dspy.LM, cap: int, n_dev: int, seed: int, options: dict[str, Any]) -> Plan:
    """The largest of DSPy's auto modes whose recommended trials fit the cap, then as many
    trials as the cap pays for; on a cap below 'light', fewer candidates."""
    demos = int(options.get("max_demos", 4))
    batch = min(int(options.get("minibatch_size", 35)), n_dev)
    steps = int(options.get("minibatch_full_eval_steps", 5))
    minibatch = batch < n_dev

    # The program-aware proposer shows the proposer DSPy's own module source, thousands of tokens
    # per call: a fixed two calls on the ledger, but minutes of compute for a small local model.
    program_aware = bool(options.get("program_aware_proposer", False))

    def cost(n: int, trials: int) -> int:
        bootstrap = max(n - 2, 0) * 2 * demos  # a bootstrapped set needs about 2 tries per kept demo
        proposals = SUMMARY_CALLS + 2 * program_aware + n
        per_trial = batch if minibatch else n_dev
        full_evals = trials // steps + 1 if minibatch else 0
        return bootstrap + proposals + n_dev + trials * per_trial + full_evals * n_dev

    def fill(n: int) -> int:
        trials = 0
        while cost(n, trials + 1) <= cap:
            trials += 1
        return trials

    if "num_candidates" in options:
        mode, n = "custom", int(options["num_candidates"])
    else:
        mode, n = next(((m, n) for m, n in MIPRO_MODES if fill(n) >= _recommended_trials(n)),
                       ("below light", next((n for n in range(6, 1, -1) if fill(n) >= 1), 2)))
    trials = int(options.get("num_trials", max(fill(n), 1)))
    optimizer = dspy.MIPROv2(metric=exact_label, prompt_model=lm, task_model=lm, auto=None, num_candidates=n,
                             max_bootstrapped_demos=demos, max_labeled_demos=demos, num_threads=1, seed=seed,
                             verbose=False)
    kwargs = {"num_trials": trials, "minibatch": minibatch, "minibatch_size": batch,
              "minibatch_full_eval_steps": steps, "program_aware_proposer": program_aware}
    return Plan(optimizer, kwargs, (
        f"MIPROv2 (auto=None, mapped from mode '{mode}'): num_candidates={n}, num_trials={trials} "
        f"(DSPy recommends {_recommended_trials(n)}), minibatch={minibatch} of {batch}, full eval every "
        f"{steps} trials, ≤ {demos} bootstrapped + {demos} labeled demos, whole dev split as valset, "
        f"program-aware proposer {'on' if program_aware else 'off (its prompts hold DSPy source code)'}; "
        f"estimated {cost(n, trials)} calls for a cap of {cap}."))


def bfrs_plan(lm: dspy.LM, cap: int, n_dev: int, seed: int, options: dict[str, Any]) -> Plan:
    """Zero-shot and labeled-only programs cost one dev evaluation each, every bootstrapped one
    a dev evaluation plus its bootstrap; as many random candidates as that leaves room for."""
    demos = int(options.get("max_demos", 4))
    labeled = int(options.get("max_labeled_demos", demos))
    per_program = n_dev + 2 * demos
    fitted = max(0, min(16, (cap - 2 * n_dev) // per_program - 1))
    n = int(options.get("num_candidate_programs", fitted))
    optimizer = dspy.BootstrapFewShotWithRandomSearch(
        metric=exact_label, max_bootstrapped_demos=demos, max_labeled_demos=labeled,
        num_candidate_programs=n, num_threads=1)
    return Plan(optimizer, {}, (
        f"BootstrapFewShotWithRandomSearch: num_candidate_programs={n} (DSPy default 16) plus its "
        f"zero-shot, labeled-only and unshuffled programs, ≤ {demos} bootstrapped and {labeled} labeled "
        f"demos (DSPy default 16 labeled; matched to prompttune's bfrs), whole dev split as valset; "
        f"estimated {2 * n_dev + (n + 1) * per_program} calls for a cap of {cap}. DSPy's candidate "
        f"seeds are fixed, so the arm seed shuffles the trainset order."))


PLANS = {"dspy-mipro": mipro_plan, "dspy-bfrs": bfrs_plan}


class DevTracker:
    """Watches the arm's scored examples and notes each program once the whole dev split has
    been scored: the anytime curve, the trial log, and the fallback choice on a budget stop."""

    def __init__(self, dev_ids: list[str], ledger: BudgetLedger, storage: JsonlStorage) -> None:
        self.dev_ids = set(dev_ids)
        self.ledger = ledger
        self.storage = storage
        self.seen: dict[PromptSpec, dict[str, bool]] = {}
        self.scores: dict[PromptSpec, float] = {}
        self.best: tuple[PromptSpec, float] | None = None
        self.anytime: list[tuple[int, float]] = []

    def observe(self, spec: PromptSpec, record: Record) -> None:
        if record.example_id not in self.dev_ids or spec in self.scores:
            return
        seen = self.seen.setdefault(spec, {})
        seen[record.example_id] = record.correct
        if len(seen) < len(self.dev_ids):
            return
        score = sum(seen.values()) / len(seen)
        self.scores[spec] = score
        if self.best is None or score > self.best[1]:
            self.best = (spec, score)
        self.anytime.append((self.ledger.calls, self.best[1]))
        self.storage.append({"number": len(self.scores) - 1, "purpose": "full dev", "n": len(seen),
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


def _choose(program: dspy.Predict | None, tracker: DevTracker, mapping: ProgramMapping,
            baseline: PromptSpec) -> tuple[PromptSpec, str]:
    if program is not None:
        return mapping.spec_of(program), "DSPy's compiled program"
    if tracker.best is not None:
        return tracker.best[0], "stopped by the cap: best program scored on the whole dev split so far"
    return baseline, "stopped by the cap before any program was scored on all of dev: baseline"


def _verdict(bench: Bench, baseline: Candidate, best: Candidate, seed: int) -> tuple[Verdict, BudgetLedger]:
    """The held-out verdict, through the same kind of cache view and ledger as a prompttune run's."""
    test = bench.task.splits["test"]
    ledger = BudgetLedger()
    evaluator = Evaluator(bench.backend, {ex.id: ex for ex in test}, {ex.id: ex for ex in bench.task.splits["train"]},
                          MeteredCache(bench.shared, ledger), ledger, scoring=bench.config.scoring)
    bench.console.print(f"confirming baseline and the DSPy program on {len(test)} held-out test examples…")
    verdict = held_out_verdict(baseline, [best], evaluator, [ex.id for ex in test], bench.config.alpha,
                               seed=seed)
    return verdict, ledger


def run_dspy_arm(bench: Bench, arm: str, seed: int) -> ArmRun:
    started = time.time()
    config = bench.arm_config(arm, seed)
    run_dir = bench.arms_dir / f"{arm}-s{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    set_aside_trials(run_dir)  # an arm an interrupted comparison left unfinished compiles again from the start
    (run_dir / "config.json").write_text(config.model_dump_json(indent=2))
    task = bench.task
    train = {ex.id: ex for ex in task.splits["train"]}
    visible = {ex.id: ex for name in ("train", "dev") for ex in task.splits[name]}
    dev_ids = [ex.id for ex in task.splits["dev"]]

    ledger = BudgetLedger(cap_calls=config.budget, cap_tokens=config.budget_tokens)
    search_view = MeteredCache(bench.shared, ledger)
    evaluator = Evaluator(bench.backend, visible, train, search_view, ledger, scoring=config.scoring)
    baseline = bench.space.default_candidate()
    mapping = ProgramMapping.build(baseline.spec, task.input_fields, task.splits["train"], task.splits["dev"])
    tracker = DevTracker(dev_ids, ledger, JsonlStorage(run_dir / "trials.jsonl"))
    engine = MeteredEngine(evaluator, tracker.observe)
    lm = dspy.LM(f"prompttune/{config.model}", engine=engine, cache=False, num_retries=0, max_tokens=96)
    order = np.random.default_rng(seed).permutation(len(train))
    trainset = [mapping.example(task.splits["train"][i]) for i in order]
    devset = [mapping.example(ex) for ex in task.splits["dev"]]

    start = len(bench.backend.flags)
    bench.console.print(f"{arm} seed {seed}: DSPy compiling (its output goes to {run_dir / 'dspy.log'})…")
    program = None
    with dspy.context(lm=lm, adapter=PromptSpecAdapter(mapping, engine)), _dspy_output_to(run_dir / "dspy.log"):
        plan = PLANS[arm](lm, config.budget, len(dev_ids), seed, config.optimizer_options)
        try:
            program = plan.optimizer.compile(mapping.program(baseline.spec, []), trainset=trainset,
                                             valset=devset, **plan.compile_kwargs)
        except BudgetStop:
            pass
    stop = len(bench.backend.flags)
    bench.console.print(f"{arm} seed {seed}: {plan.description}")
    chosen, how = _choose(program, tracker, mapping, baseline.spec)
    best = baseline if chosen == baseline.spec else spec_candidate(chosen, arm)
    verdict, confirm_ledger = _verdict(bench, baseline, best, seed)
    shipped = verdict.shipped.spec

    (run_dir / "best_prompt.json").write_text(json.dumps(
        {"candidate_id": verdict.shipped.id, "spec": asdict(shipped), "verdict": verdict.summary(),
         "is_baseline": verdict.shipped.id == baseline.id, "dev_winner_chosen_by": how, "plan": plan.description},
        indent=2, ensure_ascii=False))
    (run_dir / "dev_winner.json").write_text(json.dumps(
        {"candidate_id": best.id, "spec": asdict(chosen), "chosen_by": how,
         "label": "dev winner: ships only if the held-out verdict confirms it"}, indent=2, ensure_ascii=False))
    mapping.program(shipped, [train[i] for i in shipped.demo_ids]).save(str(run_dir / "dspy_program.json"))
    notes = [plan.description, f"Dev winner: {how}.", f"Verdict: {verdict.summary()}.",
             f"{len(tracker.scores)} programs scored on the whole dev split."]
    return ArmRun(arm, seed, run_dir, baseline.spec, shipped, tracker.scores.get(chosen),
                  verdict.shipped_confirmation, ledger,
                  confirm_ledger.calls, search_view.foreign_calls, tracker.anytime, program is None,
                  time.time() - started, notes, stop - start, bench.backend.leaks(start, stop))
