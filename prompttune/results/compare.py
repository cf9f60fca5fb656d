"""What `compare` hands back: every arm-seed run, each arm's coverage of the space, the per-arm summaries
and paired tests, the caps and fairness checks, and the equal-spend view. Produced by
`prompttune.engine.comparison` with the helpers of `prompttune.comparing`; read by the reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any, Literal

from prompttune.core.config import RunConfig
from prompttune.results.arms import ArmRun
from prompttune.scoring.confirmation import Confirmation
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.statistics.stats import PairedComparison, t_interval


@dataclass(frozen=True)
class Coverage:
    """One arm on the compared space: what it searched, what it held, and how that was enforced."""

    arm: str
    space: str
    space_hash: str  # of the space the arm is given (same-space: the shared dimensions only)
    searched: tuple[str, ...]
    held: tuple[str, ...]
    held_fields: frozenset[str]  # PromptSpec fields every pick must share with the baseline
    options: dict[str, Any]  # the options that hold written aspects the space does not declare
    dimensions: list[str] | None = None  # same-space: the dimensions every arm searches (the arm's config)
    sources: tuple[str, ...] = ()  # where its candidates come from
    def keeps_held(self, pick: PromptSpec, baseline: PromptSpec) -> bool:
        return all(getattr(pick, name) == getattr(baseline, name) for name in self.held_fields)

    def to_dict(self) -> dict[str, Any]:
        return {"space": self.space, "space_hash": self.space_hash, "searched": list(self.searched),
                "held": list(self.held), "held_fields": sorted(self.held_fields), "options": self.options,
                "dimensions": self.dimensions, "sources": list(self.sources)}


@dataclass(frozen=True)
class Cap:
    """A hard cap on each arm's search, in calls or tokens."""

    unit: Literal["calls", "tokens"]
    limit: int

    def charged(self, run: "ArmRun") -> int:
        """What the run's ledger charged, in this unit."""
        return run.search.calls if self.unit == "calls" else run.search.tokens

    def served(self, run: "ArmRun") -> int:
        """The same from the model's side: what it served to the search, plus charged cache hits."""
        if self.unit == "calls":
            return run.served.requests + run.foreign_calls
        return run.served.tokens + run.foreign_tokens


@dataclass
class Check:
    claim: str
    ok: bool
    detail: str
    level: Literal["error", "warning"] = "error"  # a failed warning is shown but fails nothing

    @property
    def status(self) -> Literal["ok", "failed", "warning"]:
        return "ok" if self.ok else "failed" if self.level == "error" else "warning"


@dataclass
class Scores:
    """Test accuracy and gain over the baseline under one keep rule, as a mean over seeds with a 95% CI."""

    accuracy: float
    accuracy_ci: tuple[float, float]
    gain: float
    gain_ci: tuple[float, float]


@dataclass
class ArmSummary:
    arm: str
    runs: list[ArmRun]
    guarded: Scores
    raw: Scores
    interval: str
    p_bh: list[float]

    @property
    def significant(self) -> int:
        """Seeds whose gain is positive and significant after the correction."""
        return sum(p < 0.05 and r.confirmation.gain > 0 for p, r in zip(self.p_bh, self.runs))


@dataclass
class PairTest:
    first: str
    second: str
    seed: int
    comparison: PairedComparison
    p_bh: float = 1.0


@dataclass
class SeedPair:
    """Two arms across the seeds they share (each seed one data draw, both arms on its test split):
    the mean of the per-seed differences in test accuracy (first − second) with its t-interval, a
    paired t-test (`p`; None when every seed differs by the same amount: no variance to test) and an
    exact sign-flip permutation test (`p_perm`: never below 2 / 2^seeds), each BH-corrected over the
    pairs of one keep rule; for what ships, a CMH test on the pooled test examples stratified by seed."""

    first: str
    second: str
    keep: str
    seeds: int
    mean_diff: float
    diff_ci: tuple[float, float]
    p: float | None
    p_perm: float
    p_cmh: float | None = None
    p_bh: float | None = None
    p_perm_bh: float = 1.0
    p_cmh_bh: float | None = None


@dataclass
class EqualSpend:
    """Each arm's dev pick at the smallest spend any arm-seed reached, tested on its seed's test split
    (raw: no verdict), per arm and seed; `calls`: what those tests asked the model (cache misses)."""

    unit: str
    spend: int
    accuracy: dict[str, dict[int, float]]
    calls: int

    def interval(self, arm: str) -> tuple[float, tuple[float, float]]:
        """Mean over seeds and its Student-t 95% interval (the value itself for one seed)."""
        values = list(self.accuracy[arm].values())
        centre = mean(values)
        return centre, t_interval(values, (0.0, 1.0)) if len(values) > 1 else (centre, centre)


@dataclass
class CompareResult:
    run_dir: Path
    config: RunConfig
    mode: str
    arms: list[str]
    seeds: list[int]
    split_seeds: dict[int, int]  # each seed's own train/dev/test draw
    coverage: dict[str, Coverage]  # per arm (the same dimensions at every seed; hashes per seed are checked)
    runs: list[ArmRun]
    summaries: list[ArmSummary]
    pairs: list[PairTest]
    seed_pairs: list[SeedPair]
    caps: list[Cap]  # the matched cap first
    checks: list[Check]
    wall_seconds: float
    equal_spend: EqualSpend | None = None
    versions: dict[str, str] = field(default_factory=dict)  # what produced it (engine.study.run_versions), once
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # per arm, as given (a variant's optimizer too)

    @property
    def baselines(self) -> dict[int, Confirmation]:
        """Each seed's baseline on its own test draw (every arm of a seed tests the same baseline)."""
        return {run.seed: run.confirmation for run in reversed(self.runs)}
