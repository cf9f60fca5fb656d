"""A finished run of any kind read back from its directory (`load_run`), so that scripts (the benchmarks, a
notebook) reopen an optimize run, a comparison or an evaluation through the run-directory schema
(`prompttune.core.run_files`) instead of parsing its files by hand."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ValidationError

from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.run_files import (
    CONFIG,
    FACTS,
    POSIX,
    PROMPT_STEMS,
    PROMPTS,
    RECORDS,
    SUMMARY,
    PromptRole,
    RunKind,
    config_text,
    finished_arms,
    prompt_file,
    read_config,
    read_facts,
    read_jsonl,
    read_prompt,
    read_summary,
    read_trials,
    run_kind,
    run_status,
)
from prompttune.results.arms import ArmRun, load_arm_run
from prompttune.results.evaluate import EvaluateConfig
from prompttune.results.run_record import read_run_config
from prompttune.search_spaces.prompt import PromptSpec


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

    kind: ClassVar[RunKind] = "optimize"

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


@dataclass(frozen=True)
class FinishedCompare:
    """What a finished comparison recorded: the run settings every arm shared, its arms, seeds and mode, the
    summary (summary.json: scores, claims, fairness checks) and every arm-seed's run (its arm.json)."""

    run_dir: Path
    config: RunConfig
    arms: list[str]
    seeds: list[int]
    mode: str
    summary: dict[str, Any]  # summary.json as written
    runs: list[ArmRun]

    kind: ClassVar[RunKind] = "compare"

    def __repr__(self) -> str:
        return f"<FinishedCompare {self.run_dir.name}: {', '.join(self.arms)} at {len(self.seeds)} seed(s)>"

    @property
    def fair(self) -> bool:
        """Whether every fairness check passed (a warning passes)."""
        return all(check["status"] != "failed" for check in self.summary["fairness"])


@dataclass(frozen=True)
class FinishedEvaluation:
    """What a finished evaluation recorded: its config, each prompt with its results (prompts.jsonl), every scored
    example (records.jsonl), POSIX per example when measured (posix.jsonl) and the summary (summary.json)."""

    run_dir: Path
    config: EvaluateConfig
    prompts: list[dict[str, Any]]
    records: list[dict[str, Any]]
    posix: list[dict[str, Any]]
    summary: dict[str, Any]  # summary.json as written

    kind: ClassVar[RunKind] = "evaluate"

    def __repr__(self) -> str:
        return f"<FinishedEvaluation {self.run_dir.name}: {len(self.prompts)} prompts>"

    def accuracies(self, scoring: str) -> list[float]:
        """Each prompt's accuracy under `scoring` (one of the summary's settings), in the prompts' order."""
        return [prompt["results"][scoring]["accuracy"] for prompt in self.prompts]


def _recorded_prompt(run_dir: Path, role: PromptRole) -> RecordedPrompt:
    record = read_prompt(run_dir, role)
    if "candidate_id" not in record:
        raise UserError(f"{prompt_file(run_dir, role)} holds no prompt spec; was it written by optimize?")
    return RecordedPrompt(record["candidate_id"], PromptSpec.from_dict(record["spec"]), record.get("dimensions") or {})


def read_finished_run(run_dir: Path) -> FinishedRun:
    """The optimize run in `run_dir`; a directory that is not a finished optimize run is one line saying why."""
    config = read_run_config(run_dir)
    status = run_status(run_dir)
    if status != "finished":
        state = "was interrupted" if status == "interrupted" else f"has no {FACTS} (still running, or killed)"
        raise UserError(f"{run_dir} is not a finished run: it {state}; `optimize --resume {run_dir}` finishes it")
    prompts = {role: _recorded_prompt(run_dir, role) for role in PROMPT_STEMS}
    return FinishedRun(run_dir, config, prompts["shipped"], prompts["dev_winner"], prompts["baseline"],
                       facts=read_facts(run_dir), trials=read_trials(run_dir))


def read_finished_compare(run_dir: Path) -> FinishedCompare:
    """The comparison in `run_dir`; an unfinished one is one line saying how to finish it."""
    saved = read_config(run_dir)
    if not (run_dir / SUMMARY).is_file():
        raise UserError(f"{run_dir} is an unfinished comparison: `compare --resume {run_dir}` finishes it")
    return FinishedCompare(run_dir, RunConfig.model_validate(saved["run"]), list(saved["optimizers"]),
                           list(saved["seeds"]), saved["mode"], read_summary(run_dir),
                           [load_arm_run(arm) for arm in finished_arms(run_dir)])


def read_finished_evaluation(run_dir: Path) -> FinishedEvaluation:
    """The evaluation in `run_dir`; one stopped before its summary is one line."""
    try:
        config = EvaluateConfig.model_validate_json(config_text(run_dir))
    except ValidationError as exc:
        raise UserError(f"{run_dir / CONFIG}: {exc.errors()[0]['msg']} (not the config of an evaluation?)") from None
    if not (run_dir / SUMMARY).is_file():
        raise UserError(f"{run_dir} is not a finished evaluation: it has no {SUMMARY} (still running, or stopped)")
    return FinishedEvaluation(run_dir, config, read_jsonl(run_dir / PROMPTS), read_jsonl(run_dir / RECORDS),
                              read_jsonl(run_dir / POSIX) if (run_dir / POSIX).is_file() else [],
                              read_summary(run_dir))


def read_finished(run_dir: Path) -> FinishedRun | FinishedCompare | FinishedEvaluation:
    """The finished run in `run_dir`, of the kind its files show (an optimize run where they show none, so that
    a directory of no kind gets the optimize reader's one line)."""
    kind = run_kind(run_dir) if run_dir.is_dir() else None
    if kind == "compare":
        return read_finished_compare(run_dir)
    if kind == "evaluate":
        return read_finished_evaluation(run_dir)
    return read_finished_run(run_dir)
