"""TEST DEVICES, not models: the synthetic colour tasks and the problems with known answers that the suite,
the benchmarks and the docstrings' runnable examples run on (here once, so tests and benchmarks share them and
backends/ holds only real backends). Their backend, `SyntheticOracleBackend`, is in `.oracle_backend`; the fake
and the llama.cpp OpenAI-compatible servers are `prompttune.testing.fake_openai` and `.llama_server`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from prompttune.core.config import DEFAULT_SERVE, RunConfig, Serve
from prompttune.core.types import Example
from prompttune.engine.study import run_study
from prompttune.results.run import RunResult
from prompttune.results.search_outcome import SearchOutcome
from prompttune.scoring.confirmation import Verdict
from prompttune.scoring.ledger import BudgetLedger
from prompttune.search_spaces.prompt import PromptSpec, render, select_demos
from prompttune.search_spaces.space import Dimension, SearchSpace
from prompttune.tasks.task import SplitSizes, Task, make_splits
from prompttune.testing.oracle_backend import SyntheticOracleBackend

COLOURS = ("red", "green", "blue")
GOOD_INSTRUCTION = "Pick the colour of the item ({labels})."
OTHER_INSTRUCTIONS = ("Say the colour of the item ({labels}).", "Tell me which colour the item has ({labels}).")


# -- the colours task as rows, as a task and as a task file for runs through the real commands -------

def painted_rows(per_colour: int) -> list[dict[str, str]]:
    """`per_colour` items of each colour, colours in turn: the rows of `demo_task` and `colours_task_file`."""
    return [{"text": f"item {i:03d} is painted {colour} all over", "colour": colour}
            for i in range(per_colour) for colour in COLOURS]


def demo_task(per_label: int = 40) -> Task:
    """A three-colour task for the oracle (test-device data for examples and doctests): 40 items per
    colour, drawn into train/dev/test halves and quarters."""
    return Task.from_records(painted_rows(per_label), label="colour", name="colours")


def colours_task_file(directory: Path, per_colour: int = 120) -> Path:
    """The colours task as a CSV and a task file in `directory` (created), for the commands and `RunConfig`."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = [f"{row['text']},{row['colour']}" for row in painted_rows(per_colour)]
    (directory / "colours.csv").write_text("text,colour\n" + "\n".join(rows) + "\n")
    path = directory / "colours.yaml"
    path.write_text("name: colours\ndata: colours.csv\ntext_columns: [text]\nlabel_column: colour\n"
                    "labels: {red: [red], green: [green], blue: [blue]}\n")
    return path


# -- a ready-made problem on the oracle, for the runnable examples in the optimizers' docstrings ----

def _digest(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def is_better(text: str, rare: bool = False) -> bool:
    """The truly better prompts of `OracleProblem` and the error-rate problem: 'Pick' in the instruction,
    or two or more demos (query included: 3 texts); `rare`: only 'Pick' with the 'Label:' output and the
    ' | ' separator (3 of the error-rate space's 54 prompts, whatever the field name; 3 of
    `error_rate_space_72`'s 72 as well), so a search must find three choices together."""
    if rare:
        return "Pick the colour" in text and "Label:" in text and " | " in text
    return "Pick the colour" in text or text.count(" is about colour ") >= 3


def scripted_proposals(text: str) -> str:
    """A scripted proposer that depends only on what it was asked (its calls are cached by prompt):
    critiques and task summaries, a word list, or one of three instructions, one of them good."""
    if "In one sentence" in text or "Describe in one sentence" in text:
        return f"Mention the colour list explicitly (note {_digest(text) % 1000:03d})."
    if "single words" in text:
        return "Choose, Give"
    return (GOOD_INSTRUCTION, *OTHER_INSTRUCTIONS)[_digest(text) % 3]


@dataclass
class OracleProblem:
    """A TEST DEVICE, not a task: a three-colour problem on the `SyntheticOracleBackend`, with a search
    space that every strategy can improve in its own way: the word slot `{verb}` (Name, Pick, State),
    the output and field formats, proposed instructions (`scripted_proposals`) and demo sets. By
    default a prompt is better (0.85 against 0.55) when `is_better` says so. For the runnable examples
    in the optimizers' docstrings, which run it through `prompttune.optimize`."""

    task: Task
    space: SearchSpace
    backend: SyntheticOracleBackend

    @classmethod
    def colours(cls, accuracy: Callable[[str], float] | None = None, sizes: tuple[int, int, int] = (60, 120, 60),
                seed: int = 0) -> "OracleProblem":
        """Train, dev and test of `sizes` examples (colours in turn); `accuracy` of a prompt's text
        (default: 0.85 when `is_better`, else 0.55)."""
        n = sum(sizes)
        examples = [Example(f"colour-{i:04d}", {"text": f"item {i:04d} is about colour {COLOURS[i % 3]}."}, i % 3)
                    for i in range(n)]
        train, dev, test = (examples[:sizes[0]], examples[sizes[0]:sizes[0] + sizes[1]],
                            examples[sizes[0] + sizes[1]:])
        base = PromptSpec(instruction="{verb} the colour of the item ({labels}).",
                          input_templates=(("text", "Input: {}"),), label_words=COLOURS)
        space = SearchSpace("oracle-colours", base, [
            Dimension("verb", ("Name", "Pick", "State"), "slot:verb", kind="word"),
            Dimension("output", ("Answer: {}", "Label: {}", "Colour: {}"), "output_template"),
            Dimension("field", ("Input: {}", "Text: {}", "Item: {}"), "input:text")]).bind(train)
        backend = SyntheticOracleBackend(examples, accuracy or (lambda text: 0.85 if is_better(text) else 0.55),
                                         seed=seed, proposals=scripted_proposals)
        task = Task("oracle-colours", list(COLOURS), [[c] for c in COLOURS], ["text"],
                    {"train": train, "dev": dev, "test": test})
        return cls(task, space, backend)


# -- runs on the oracle through the run engine, and the error-rate problem ------------------------

def synthetic_task(n_per_class: int = 60, seed: int = 0, sizes: SplitSizes = SplitSizes(40, 60, 60)) -> Task:
    """A three-class task with unique, searchable texts (for the synthetic oracle)."""
    labels = ["red", "green", "blue"]
    pool = [Example(f"syn-{c}-{i}", {"text": f"item {c}-{i} is about colour {labels[c]} number {i}."}, c)
            for c in range(3) for i in range(n_per_class)]
    splits = make_splits({"train": pool, "dev": pool, "test": pool}, sizes, seed, "synthetic")
    return Task("synthetic", labels, [[w, w.upper()] for w in labels], ["text"], splits,
                "Name the colour.")


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
    """1,440 prompts over field, output, instruction and separator, scored by `oracle_accuracy`."""
    dims = [Dimension("field", FIELDS, "input:text"), Dimension("output", OUTPUTS, "output_template"),
            Dimension("instruction", INSTRUCTIONS, "instruction", kind="instruction"),
            Dimension("separator", SEPARATORS, "intra_separator")]
    base = PromptSpec(input_templates=(("text", "Input: {}"),), label_words=("red", "green", "blue"))
    return SearchSpace("oracle", base, dims)


@dataclass
class OracleRun:
    """A `run_oracle` result with the task and oracle it ran on, so tests can ask what was truly better."""

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
               accuracy: Callable[[str], float] = oracle_accuracy, proposals: Callable[[str], str] | None = None,
               correlation: float = 0.0, alpha: float = 0.05, dev_alpha: float = 0.10, confirm_top: int = 1,
               serve: Serve = DEFAULT_SERVE) -> OracleRun:
    """One search on the oracle and the held-out verdict, through the run engine (no run directory), in the
    serving contract `serve`."""
    task = synthetic_task(n_per_class=max(200, sum(vars(sizes).values()) // 3 + 1), sizes=sizes)
    backend = SyntheticOracleBackend.for_task(task, accuracy, seed=seed, proposals=proposals,
                                              difficulty_correlation=correlation)
    config = RunConfig(task=task.name, optimizer=optimizer, budget=budget, seed=seed, optimizer_options=options or {},
                       alpha=alpha, dev_alpha=dev_alpha, confirm_top=confirm_top, train_size=sizes.train,
                       dev_size=sizes.dev, test_size=sizes.test, serve=serve)
    result = run_study(config, task=task, space=space or oracle_space(), backend=backend, record=False)
    return OracleRun(result, task, backend)


# -- the error-rate problem (benchmarks/error_rates.py and its small version in the suite) ------------
# One space that every optimizer can improve in its own way: the word slot `{verb}` (random, sh,
# spread, cople), proposed instructions (p2g, mipro) and demo sets (bfrs, mipro). A prompt is
# "better" when it says "Pick" or carries at least two demos; every other prompt has the base
# accuracy. Under the null (delta = 0) every prompt is equally good.

ERROR_RATE_SIZES = SplitSizes(200, 300, 1000)


def error_rate_space() -> SearchSpace:
    dims = [Dimension("verb", ("Name", "Pick", "State"), "slot:verb", kind="word"),
            Dimension("field", ("Input: {}", "Text: {}", "Item: {}"), "input:text"),
            Dimension("output", ("Answer: {}", "Label: {}", "Colour: {}"), "output_template"),
            Dimension("separator", ("\n", " | "), "intra_separator")]
    base = PromptSpec(instruction="{verb} the colour of the item ({labels}).",
                      input_templates=(("text", "Input: {}"),), label_words=("red", "green", "blue"))
    return SearchSpace("error-rates", base, dims)


def error_rate_space_72() -> SearchSpace:
    """The error-rate problem in another shape (benchmarks/error_rates.py's `+10-rare72`): the verb slot,
    field and separator of `error_rate_space`, a fourth output format ('Class:'): 3 × 3 × 4 × 2 = 72
    prompts. `is_better(text, rare=True)` names 3 of them, as of the 54 ('Pick', 'Label:', ' | ', any
    field), but the output is now one of four: the better prompts are 1 in 24 of the grid (1 in 18 there),
    and for an optimizer that writes its own 'Pick' instruction 1 in 8 of the output × separator choices
    (1 in 6 there)."""
    dims = [Dimension("verb", ("Name", "Pick", "State"), "slot:verb", kind="word"),
            Dimension("field", ("Input: {}", "Text: {}", "Item: {}"), "input:text"),
            Dimension("output", ("Answer: {}", "Label: {}", "Colour: {}", "Class: {}"), "output_template"),
            Dimension("separator", ("\n", " | "), "intra_separator")]
    base = PromptSpec(instruction="{verb} the colour of the item ({labels}).",
                      input_templates=(("text", "Input: {}"),), label_words=("red", "green", "blue"))
    return SearchSpace("error-rates-72", base, dims)


ERROR_RATE_SPACES: dict[str, Callable[[], SearchSpace]] = {"54": error_rate_space, "72": error_rate_space_72}
"""The error-rate problem's spaces by shape (their number of prompts), for `error_rate_run`'s `shape`."""


def error_rate_accuracy(delta: float, base: float = 0.6, rare: bool = False) -> Callable[[str], float]:
    """`base`, and `base + delta` for the prompts `is_better` names (delta 0: the null)."""
    return lambda text: base + delta if is_better(text, rare) else base


def critique(text: str) -> str:
    """A scripted critic's answer that depends on what it was shown, as a real model's does: proposer
    calls are cached by prompt, so a constant critique would make every edit prompt alike."""
    return f"Mention the colour list explicitly (note {hashlib.sha256(text.encode()).hexdigest()[:6]})."


def error_rate_proposer() -> Callable[[str], str]:
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
                   options: dict | None = None, *, shape: str = "54", serve: Serve = DEFAULT_SERVE) -> dict:
    """One search and verdict on the error-rate problem: did it confirm, is what ships truly better?
    `shape` picks the space from `ERROR_RATE_SPACES` (default: `error_rate_space`, 54 prompts); `serve` the
    contract the search and the verdict score in."""
    if shape not in ERROR_RATE_SPACES:
        raise ValueError(f"error-rate space shape {shape!r}: known shapes are {', '.join(ERROR_RATE_SPACES)}")
    run = run_oracle(name, budget, seed=seed, sizes=ERROR_RATE_SIZES, space=ERROR_RATE_SPACES[shape](),
                     accuracy=error_rate_accuracy(delta, rare=rare), proposals=error_rate_proposer(),
                     correlation=rho, options=options, serve=serve)
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
