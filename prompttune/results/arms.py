"""What one compared arm at one seed yields (`ArmRun`), what the model served it (`Served`), and arm.json,
the record a finished arm leaves so that `compare --resume` reads it back instead of running it again."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import ConfigDict, TypeAdapter

from prompttune.core.run_files import ARM
from prompttune.core.storage import write_atomic
from prompttune.scoring.confirmation import Confirmation
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.per_class import PerClass
from prompttune.scoring.serving import GenerationCheck
from prompttune.search_spaces.prompt import PromptSpec


@dataclass(frozen=True)
class Served:
    """What the model served in one window of the watch's request log."""

    requests: int
    tokens: int  # as the model reported them (prompt and completion)
    leaks: int  # requests whose prompt quoted a test example


@dataclass
class ArmRun:
    """One arm at one seed: its own pick (raw), what it ships after the held-out verdict (guarded:
    `best`, `confirmation`), the space it searched, and what it spent."""

    __pydantic_config__ = ConfigDict(ser_json_inf_nan="constants")  # a dev score never measured is NaN

    arm: str
    seed: int
    run_dir: Path
    baseline: PromptSpec
    best: PromptSpec
    best_dev: float | None
    confirmation: Confirmation
    raw: PromptSpec  # the dev winner / DSPy's program, whatever the verdict
    raw_confirmation: Confirmation  # its test figures, from the verdict's own records
    space_hash: str
    search: BudgetLedger
    confirm_calls: int
    foreign_calls: int  # shared-cache hits charged to the search (they reached no model)
    foreign_tokens: int
    anytime: list[tuple[int, float]]
    stopped_by_budget: bool
    wall_seconds: float
    notes: list[str]
    served: Served  # what the model served to the search, counted at the model
    test_ids: tuple[str, ...]  # the test examples its verdict scored
    leaders: list[tuple[int, int, PromptSpec]] = field(default_factory=list)  # (calls, tokens, pick) at each change
    test_correct: list[bool] = field(default_factory=list)  # the winner on each test example
    per_class: PerClass | None = None  # per-class test figures of its verdict (None in arms saved before them)
    generation_check: GenerationCheck | None = None  # compare --check-generation N: its prompts served by generation


_ARM_RUN = TypeAdapter(ArmRun)


def save_arm_run(run: ArmRun) -> None:
    """arm.json beside the arm's own files, written last: the arm finished, and `compare --resume`
    reads it back instead of running the arm again."""
    write_atomic(run.run_dir / ARM, _ARM_RUN.dump_json(run, indent=2).decode())


def load_arm_run(run_dir: Path) -> ArmRun:
    """A finished arm read back from its directory (wherever the comparison now lies)."""
    return replace(_ARM_RUN.validate_json((run_dir / ARM).read_text(encoding="utf-8")), run_dir=run_dir)
