"""What `evaluate` hands back: each prompt's score under each scoring, the set's summary, ensembles, POSIX,
and the config it ran (saved verbatim to config.json). Produced by `prompttune.engine.evaluate`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from prompttune.core.config import BackendConfig, PathText, RunConfig, Serve
from prompttune.core.errors import UserError
from prompttune.core.types import Record
from prompttune.scoring.contract import GENERATION
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.per_class import PerClass
from prompttune.scoring.prompt_sources import NamedPrompt
from prompttune.scoring.sensitivity import PosixResult
from prompttune.statistics.multiprompt import PromptSetSummary, top_two_gap
from prompttune.tasks import Task

SINGLE_PROMPT_SCORINGS = ("logit", "generate", "calibrated")


class EvaluateConfig(BackendConfig):
    """Everything `evaluate` was asked to do (saved verbatim to config.json)."""

    task: PathText = "agnews"
    data_dir: PathText | None = None
    prompts: PathText | None = Field(None, description="prompts file: a YAML/JSON list of templates")
    space: PathText | None = Field(None, description="space file for --sample; default: the built-in space")
    prompt: PathText | None = Field(None, description="your prompt file (replaces the task file's): --sample draws "
                                                 "from the space derived around it")
    sample: int | None = Field(None, gt=0, description="evaluate N distinct candidates of the space")
    split: Literal["dev", "test"] = "test"
    serve: Serve | None = Field(None, description="the serving contract the prompts are scored under: generate scores "
                                                 "by generation (the verdict's settings), choice by constrained "
                                                 "decoding, logprobs by label log-probabilities; sets `scoring`")
    scoring: str = "logit"
    calibrate: bool = Field(False, description="also score with contextual calibration and compare")
    ensemble: int | None = Field(None, ge=2, description="template ensembles of K prompts")
    posix: bool = False
    posix_size: int = Field(10, gt=0, description="examples used for POSIX (N² scored responses each)")
    top_k: int = Field(3, gt=0, description="k of the top-k IoU between settings")
    class_loss_margin: float = Field(RunConfig.model_fields["class_loss_margin"].default, ge=0, le=1,
                                     description="flag a class whose recall under a prompt drops more than this "
                                                 "below the first prompt's")
    budget: int | None = Field(None, gt=0, description="optional hard cap on model calls")
    max_new_tokens: int = Field(GENERATION.max_tokens, gt=0, description="generation length (generate scoring, POSIX)")
    seed: int = Field(0, description="sampling seed (--sample, ensembles)")
    split_seed: int = Field(0, description="seed of the train/dev/test draw, as in optimize")
    train_size: int = Field(1000, gt=0)
    dev_size: int = Field(300, gt=0)
    test_size: int = Field(1000, gt=0)
    runs_dir: PathText = "runs"
    cache: PathText | None = None

    @model_validator(mode="after")
    def _contract_scoring(self) -> "EvaluateConfig":
        """`serve` decides the scoring, with the generation settings an optimize verdict under it used."""
        if self.serve is None:
            return self
        meant = {"generate": "generate", "choice": "choice"}.get(self.serve, "logit")
        if "scoring" in self.model_fields_set and self.scoring != meant:
            raise ValueError(f"--scoring {self.scoring} and --serve {self.serve} disagree: give --serve alone")
        if self.serve == "generate" and self.max_new_tokens != GENERATION.max_tokens:
            raise ValueError(f"--serve generate pins generation at {GENERATION.max_tokens} new tokens (as the "
                             f"optimize verdict); drop --max-new-tokens {self.max_new_tokens}")
        self.scoring = meant
        return self

    def run_config(self) -> RunConfig:
        """The settings shared with `optimize` (model, run directory naming)."""
        backend = {name: getattr(self, name) for name in BackendConfig.model_fields}
        return RunConfig(task=self.task, optimizer="evaluate", seed=self.seed, split_seed=self.split_seed,
                         runs_dir=self.runs_dir, **backend)

    def settings(self) -> list[str]:
        """The scorings compared: `scoring`, plus calibrated (or raw logit) with --calibrate."""
        if self.scoring not in SINGLE_PROMPT_SCORINGS:
            hint = "; use --ensemble K for template ensembles" if self.scoring == "ensemble" else ""
            raise UserError(f"unknown scoring {self.scoring!r}; choose from "
                            f"{', '.join(SINGLE_PROMPT_SCORINGS)}{hint}")
        if not self.calibrate:
            return [self.scoring]
        return [self.scoring, "calibrated" if self.scoring != "calibrated" else "logit"]


@dataclass(frozen=True)
class PromptScore:
    """One prompt under one setting: accuracy, valid rate v, accuracy among valid a, all with Wilson CIs."""

    accuracy: float
    accuracy_ci: tuple[float, float]
    valid_rate: float
    valid_ci: tuple[float, float]
    valid_accuracy: float
    valid_accuracy_ci: tuple[float, float]
    macro_f1: float
    median_gap: float | None  # top-two label log-prob gap; None without label scores


@dataclass
class SettingResult:
    """All prompts under one scoring: records [prompt][example], per-prompt scores, set summary, and
    per-class figures with the classes each prompt loses against the first."""

    scoring: str
    records: list[list[Record]]
    scores: list[PromptScore]
    summary: PromptSetSummary
    per_class: PerClass

    def gaps(self) -> np.ndarray | None:
        """Top-two gaps of every (prompt, example), or None when the setting has no label scores."""
        if any(r.label_logprobs is None for rows in self.records for r in rows):
            return None
        return np.concatenate([top_two_gap(np.array([r.label_logprobs for r in rows]))
                               for rows in self.records])


@dataclass(frozen=True)
class EnsembleResult:
    members: tuple[int, ...]  # prompt indices
    score: PromptScore
    member_accuracies: tuple[float, ...]


@dataclass(frozen=True)
class PromptComparison:
    """Would the two settings pick the same prompts? Top-k overlap and rank correlation."""

    a: str
    b: str
    k: int
    iou: float
    spearman: float


@dataclass
class EvaluationResult:
    run_dir: Path
    config: EvaluateConfig
    task: Task
    prompts: list[NamedPrompt]
    example_ids: list[str]
    settings: list[SettingResult]
    comparison: PromptComparison | None
    ensembles: list[EnsembleResult] | None
    ensemble_base: str | None
    posix: PosixResult | None
    ledger: BudgetLedger
    model_id: str
    wall_seconds: float
    versions: dict[str, str]  # what produced it (engine.study.run_versions)
