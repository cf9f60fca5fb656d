"""Test support shared by the suite and benchmarks/error_rates.py: a synthetic task, a backend that counts
the requests reaching it, and synthetic-oracle problems with known answers (test devices only)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from prompttune.backends.base import Backend, WrappedBackend
from prompttune.backends.oracle import SyntheticOracleBackend
from prompttune.core.config import RunConfig
from prompttune.core.types import Example, GenerateRequest, ScoreRequest
from prompttune.engine.setup import load_run_task
from prompttune.engine.study import run_study
from prompttune.evaluation.confirmation import Verdict
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.optimizers.base import SearchOutcome
from prompttune.results.run import RunResult
from prompttune.search_spaces.prompt import PromptSpec, render, select_demos
from prompttune.search_spaces.space import Dimension, SearchSpace
from prompttune.tasks.base import SplitSizes, Task, make_splits


def model_calls(result: RunResult) -> int:
    """Every call a run made: the search's, the verdict's and the default generation check's (its own ledger)."""
    check = result.generation_check.calls if result.generation_check else 0
    return result.search_ledger.calls + result.confirm_ledger.calls + check


def synthetic_task(n_per_class: int = 60, seed: int = 0, sizes: SplitSizes = SplitSizes(40, 60, 60)) -> Task:
    """A three-class task with unique, searchable texts (for the synthetic oracle)."""
    labels = ["red", "green", "blue"]
    pool = [Example(f"syn-{c}-{i}", {"text": f"item {c}-{i} is about colour {labels[c]} number {i}."}, c)
            for c in range(3) for i in range(n_per_class)]
    splits = make_splits({"train": pool, "dev": pool, "test": pool}, sizes, seed, "synthetic")
    return Task("synthetic", labels, [[w, w.upper()] for w in labels], ["text"], splits,
                "Name the colour.")


class CountingBackend(WrappedBackend):
    """Wraps a backend and counts the requests that really reach it."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.calls = 0

    def score(self, requests: list[ScoreRequest]):
        self.calls += len(requests)
        return self.inner.score(requests)

    def generate(self, requests: list[GenerateRequest]):
        self.calls += len(requests)
        return self.inner.generate(requests)


FIELDS = ("Input: {}", "Text: {}", "Data: {}", "Query: {}", "Item: {}", "Example: {}")
OUTPUTS = ("Answer: {}", "Label: {}", "Output: {}", "Class: {}", "Colour: {}", "Result: {}")
INSTRUCTIONS = ("Name the colour.", "Which colour is it?", "Pick the colour ({labels}).",
                "Classify the colour.", "State the colour.")
SEPARATORS = ("\n", " ", "\n\n", " | ", " ; ", " / ", " -- ", "\t")
# 6 × 6 × 5 × 8 = 1,440 candidates: the size of the successive-halving seed schedule.


def oracle_accuracy(text: str) -> float:
    """Known ground truth: 'Colour:' output + 'Pick the colour' instruction is best (0.9)."""
    accuracy = 0.5
    accuracy += 0.25 if "Colour:" in text else 0.0
    accuracy += 0.15 if "Pick the colour" in text else 0.0
    accuracy -= 0.1 if "Data:" in text else 0.0
    return accuracy


def oracle_space() -> SearchSpace:
    dims = [Dimension("field", FIELDS, "input:text"), Dimension("output", OUTPUTS, "output_template"),
            Dimension("instruction", INSTRUCTIONS, "instruction", kind="instruction"),
            Dimension("separator", SEPARATORS, "intra_separator")]
    base = PromptSpec(input_templates=(("text", "Input: {}"),), label_words=("red", "green", "blue"))
    return SearchSpace("oracle", base, dims)


@dataclass
class OracleRun:
    result: RunResult
    task: Task
    backend: SyntheticOracleBackend

    @property
    def outcome(self) -> SearchOutcome:
        return self.result.outcome

    @property
    def verdict(self) -> Verdict:
        return self.result.verdict

    @property
    def ledger(self) -> BudgetLedger:
        return self.result.search_ledger

    @property
    def optimizer(self):
        return self.result.strategy.optimizer

    @property
    def storage(self):
        return self.result.trials


def run_oracle(optimizer: str, budget: int, seed: int = 0, sizes: SplitSizes = SplitSizes(200, 300, 50),
               space: SearchSpace | None = None, options: dict | None = None,
               accuracy=oracle_accuracy, proposals=None, correlation: float = 0.0, alpha: float = 0.05,
               dev_alpha: float = 0.10, confirm_top: int = 1) -> OracleRun:
    """One search on the oracle and the held-out verdict, through the run engine (no run directory)."""
    task = synthetic_task(n_per_class=max(200, sum(vars(sizes).values()) // 3 + 1), sizes=sizes)
    backend = SyntheticOracleBackend.for_task(task, accuracy, seed=seed, proposals=proposals,
                                              difficulty_correlation=correlation)
    config = RunConfig(task=task.name, optimizer=optimizer, budget=budget, seed=seed, optimizer_options=options or {},
                       alpha=alpha, dev_alpha=dev_alpha, confirm_top=confirm_top, train_size=sizes.train,
                       dev_size=sizes.dev, test_size=sizes.test)
    result = run_study(config, task=task, space=space or oracle_space(), backend=backend, record=False)
    return OracleRun(result, task, backend)


# -- the error-rate problem (benchmarks/error_rates.py and its small version in the suite) ------------
# One space that every optimizer can improve in its own way: the word slot `{verb}` (random, sh,
# spread, cople), proposed instructions (p2g, mipro) and demo sets (bfrs, mipro). A prompt is
# "better" when it says "Pick" or carries at least two demos; every other prompt has the base
# accuracy. Under the null (delta = 0) every prompt is equally good.

ERROR_RATE_SIZES = SplitSizes(200, 300, 1000)
GOOD_INSTRUCTION = "Pick the colour of the item ({labels})."
OTHER_INSTRUCTIONS = ("Say the colour of the item ({labels}).", "Tell me which colour the item has ({labels}).")


def error_rate_space() -> SearchSpace:
    dims = [Dimension("verb", ("Name", "Pick", "State"), "slot:verb", kind="word"),
            Dimension("field", ("Input: {}", "Text: {}", "Item: {}"), "input:text"),
            Dimension("output", ("Answer: {}", "Label: {}", "Colour: {}"), "output_template"),
            Dimension("separator", ("\n", " | "), "intra_separator")]
    base = PromptSpec(instruction="{verb} the colour of the item ({labels}).",
                      input_templates=(("text", "Input: {}"),), label_words=("red", "green", "blue"))
    return SearchSpace("error-rates", base, dims)


def is_better(text: str, rare: bool = False) -> bool:
    """The truly better prompts: 'Pick' in the instruction, or two or more demos (query included: 3
    texts); `rare`: only 'Pick' with the 'Label:' output and the ' | ' separator (3 of the space's 54
    prompts, whatever the field name), so a search must find three choices together."""
    if rare:
        return "Pick the colour" in text and "Label:" in text and " | " in text
    return "Pick the colour" in text or text.count(" is about colour ") >= 3


def error_rate_accuracy(delta: float, base: float = 0.6, rare: bool = False):
    return lambda text: base + delta if is_better(text, rare) else base


def critique(text: str) -> str:
    """A scripted critic's answer that depends on what it was shown, as a real model's does: proposer
    calls are cached by prompt, so a constant critique would make every edit prompt alike."""
    return f"Mention the colour list explicitly (note {hashlib.sha256(text.encode()).hexdigest()[:6]})."


def error_rate_proposer():
    """Scripted proposer: critiques and summaries, word lists, and instructions of which one in three is good."""
    turn = [0]

    def propose(text: str) -> str:
        if "In one sentence" in text or "Describe in one sentence" in text:
            return critique(text)
        if "single words" in text:
            return "shade, tint"
        turn[0] += 1
        return (GOOD_INSTRUCTION, *OTHER_INSTRUCTIONS)[turn[0] % 3]
    return propose


def error_rate_run(name: str, budget: int, seed: int, delta: float, rho: float, rare: bool = False,
                   options: dict | None = None) -> dict:
    """One search and verdict on the error-rate problem: did it confirm, is what ships truly better?"""
    run = run_oracle(name, budget, seed=seed, sizes=ERROR_RATE_SIZES, space=error_rate_space(),
                     accuracy=error_rate_accuracy(delta, rare=rare), proposals=error_rate_proposer(),
                     correlation=rho, options=options)
    train = {e.id: e for e in run.task.splits["train"]}
    example = run.task.splits["test"][0]

    def better(spec: PromptSpec) -> bool:
        return is_better(run.backend.to_text(render(spec, example, select_demos(spec, train))), rare)

    verdict, outcome = run.verdict, run.outcome
    return {"confirmed": verdict.confirmed is not None,
            "ships_better": verdict.confirmed is not None and better(verdict.shipped.spec),
            "leader_better": better(outcome.leader.spec),
            "leader_is_baseline": outcome.leader.id == run.optimizer.baseline.id,
            "sweeps": outcome.sweeps, "sweeps_with_accept": outcome.sweeps_with_accept, "calls": run.ledger.calls}


# -- a colours task file and an oracle for runs through the real commands ---------------------------

COLOURS = ("red", "green", "blue")


def colours_task_file(tmp_path: Path, per_colour: int = 120) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    rows = [f"item {i:03d} is painted {c} all over,{c}" for i in range(per_colour) for c in COLOURS]
    (tmp_path / "colours.csv").write_text("text,colour\n" + "\n".join(rows) + "\n")
    path = tmp_path / "colours.yaml"
    path.write_text("name: colours\ndata: colours.csv\ntext_columns: [text]\nlabel_column: colour\n"
                    "labels: {red: [red], green: [green], blue: [blue]}\n")
    return path


def oracle_config(tmp_path: Path, **changes) -> RunConfig:
    fields = dict(task=str(colours_task_file(tmp_path)), budget=300, train_size=60, dev_size=60,
                  test_size=90, runs_dir=str(tmp_path / "runs"))
    return RunConfig(**{**fields, **changes})


def task_of(config: RunConfig) -> Task:
    return load_run_task(config)


def colours_accuracy(text: str) -> float:
    """A 'Label:' output or the second instruction of the colours task's default space helps."""
    return 0.45 + (0.3 if "Label:" in text else 0.0) + (0.15 if "Choose the correct" in text else 0.0)


def oracle_for(config: RunConfig, accuracy: Callable[[str], float] = colours_accuracy) -> CountingBackend:
    """Known accuracies (by default `colours_accuracy`) for every example of the config's task, in
    the draws of the first eight split seeds (a comparison's seeds each draw their own)."""
    draws = [task_of(config.model_copy(update={"split_seed": config.split_seed + k})) for k in range(8)]
    examples = list({e.id: e for task in draws for split in task.splits.values() for e in split}.values())
    return CountingBackend(SyntheticOracleBackend(examples, accuracy,
                                                  proposals=lambda t: f"Name the colour ({len(t) % 5}): "
                                                                      "red, green or blue."))


def comparison_outcome(compare_dir: Path) -> dict:
    """summary.json without what an interruption, or the order parallel workers finish in, may change: paths,
    wall times, how many charged calls and tokens a cache served rather than the model (a resumed arm's replayed
    calls are such hits) and the fairness checks' free-text details."""
    summary = json.loads((compare_dir / "summary.json").read_text())
    for arm in summary["arms"]:
        for run in arm["runs"]:
            for key in ("run_dir", "wall_seconds", "shared_cache_hits_charged", "shared_cache_tokens_charged",
                        "served_by_model"):
                del run[key]
            del run["search"]["calls_by_kind"]
    summary["fairness"] = [(check["claim"], check["ok"]) for check in summary["fairness"]]
    return summary
