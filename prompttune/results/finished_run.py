"""A finished optimize run read back from its directory, so that scripts (the benchmarks, a notebook) reopen a
run through one reader of the files the engine writes instead of parsing them by hand."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.storage import JsonlStorage, read_json
from prompttune.results.run_record import FACTS, read_run_config, run_status
from prompttune.search_spaces.prompt import PromptSpec

PROMPT_FILES = {"shipped": "best_prompt.json", "dev_winner": "dev_winner.json", "baseline": "baseline_prompt.json"}


@dataclass(frozen=True)
class RecordedPrompt:
    """One of the run's prompts as its directory records it: its candidate id, spec and search dimensions."""

    id: str
    spec: PromptSpec
    dimensions: dict[str, Any]


@dataclass(frozen=True)
class FinishedRun:
    """What a finished run recorded: its config, the shipped, dev-winner and baseline prompts, the verdict and
    search facts (verdict.json) and every trial (trials.jsonl). Nothing here talks to a model."""

    run_dir: Path
    config: RunConfig
    shipped: RecordedPrompt
    dev_winner: RecordedPrompt
    baseline: RecordedPrompt
    facts: dict[str, Any]  # verdict.json as written
    trials: list[dict[str, Any]]

    def __repr__(self) -> str:
        """One line (the dataclass's own would print every trial)."""
        return f"<FinishedRun {self.run_dir.name}: {self.summary}>"

    @property
    def confirmed(self) -> bool:
        """Whether the held-out test confirmed a prompt over the baseline (else the baseline shipped)."""
        return any(tested["confirmed"] for tested in self.facts["verdict"]["tested"])

    @property
    def summary(self) -> str:
        """The verdict's one line, as the run printed it."""
        return self.facts["verdict"]["summary"]

    @property
    def wall_seconds(self) -> float:
        return self.facts["wall_seconds"]


def _recorded_prompt(path: Path) -> RecordedPrompt:
    record = read_json(path)
    if not isinstance(record, dict) or not isinstance(record.get("spec"), dict) or "candidate_id" not in record:
        raise UserError(f"{path} holds no prompt spec; was it written by optimize?")
    return RecordedPrompt(record["candidate_id"], PromptSpec.from_dict(record["spec"]), record.get("dimensions") or {})


def read_finished_run(run_dir: Path) -> FinishedRun:
    """The run in `run_dir`; a directory that is not a finished optimize run is one line saying why."""
    config = read_run_config(run_dir)
    status = run_status(run_dir)
    if status != "finished":
        state = "was interrupted" if status == "interrupted" else f"has no {FACTS} (still running, or killed)"
        raise UserError(f"{run_dir} is not a finished run: it {state}; `optimize --resume {run_dir}` finishes it")
    prompts = {name: _recorded_prompt(run_dir / file) for name, file in PROMPT_FILES.items()}
    trials = run_dir / "trials.jsonl"
    return FinishedRun(run_dir, config, facts=read_json(run_dir / FACTS),
                       trials=JsonlStorage(trials).load() if trials.is_file() else [], **prompts)
