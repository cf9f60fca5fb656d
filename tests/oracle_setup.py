"""A synthetic-oracle search problem with a known best candidate (test device only)."""

from __future__ import annotations

from dataclasses import dataclass

from prompttune.backends.oracle import SyntheticOracleBackend
from prompttune.evaluation.cache import ResultCache
from prompttune.evaluation.evaluator import Evaluator
from prompttune.evaluation.ledger import BudgetLedger
from prompttune.objectives.stats import AcceptRule
from prompttune.optimizers import SearchContext, get_optimizer, run_search
from prompttune.optimizers.base import SearchOutcome
from prompttune.optimizers.proposer import Proposer
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.search_spaces.space import Dimension, SearchSpace
from prompttune.storage import InMemoryStorage
from prompttune.tasks.base import SplitSizes, Task
from tests.conftest import synthetic_task

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
    outcome: SearchOutcome
    ledger: BudgetLedger
    storage: InMemoryStorage
    task: Task
    optimizer: object


def run_oracle(optimizer: str, budget: int, seed: int = 0, sizes: SplitSizes = SplitSizes(200, 300, 50),
               space: SearchSpace | None = None, options: dict | None = None,
               accuracy=oracle_accuracy, proposals=None) -> OracleRun:
    task = synthetic_task(n_per_class=max(200, sum(vars(sizes).values()) // 3 + 1), sizes=sizes)
    examples = [e for split in task.splits.values() for e in split]
    backend = SyntheticOracleBackend(examples, accuracy, seed=seed, proposals=proposals)
    ledger = BudgetLedger(cap_calls=budget)
    train = {e.id: e for e in task.splits["train"]}
    visible = {e.id: e for s in ("train", "dev") for e in task.splits[s]}
    evaluator = Evaluator(backend, visible, train, ResultCache(), ledger)
    space = (space or oracle_space()).bind(task.splits["train"])
    context = SearchContext(space, list(train), [e.id for e in task.splits["dev"]], 3, seed=seed,
                            budget=budget, options=options or {}, accept_rule=AcceptRule())
    opt = get_optimizer(optimizer)(context, Proposer(backend, ledger))
    storage = InMemoryStorage()
    return OracleRun(run_search(opt, evaluator, storage), ledger, storage, task, opt)
