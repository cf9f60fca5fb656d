"""Test support for the suite: a backend that counts the requests reaching it, run configs and oracles on the
colours task file, and what a comparison's outcome is compared on. The test devices themselves (tasks, oracle,
problems with known answers) are in `prompttune.testing`, shared with the benchmarks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from prompttune.backends.backend import Backend, WrappedBackend
from prompttune.core.config import RunConfig
from prompttune.core.types import ChoiceRequest, GenerateRequest, ScoreRequest
from prompttune.results.run import RunResult
from prompttune.tasks import load_run_task
from prompttune.tasks.task import Task
from prompttune.testing import SyntheticOracleBackend, colours_task_file


def model_calls(result: RunResult) -> int:
    """Every call a run made: the search's, the verdict's and the default generation check's (its own ledger)."""
    check = result.generation_check.calls if result.generation_check else 0
    return result.search_ledger.calls + result.confirm_ledger.calls + check


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

    def choose(self, requests: list[ChoiceRequest]):
        self.calls += len(requests)
        return self.inner.choose(requests)


# -- an oracle for runs through the real commands on the colours task file ---------------------------

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
