"""The test split is spent once per decision.

Every held-out verdict is a look at a test split. Two bookkeeping rules keep the error honest:

- Within a run, α is spent, not reused: an interrupted run's interim verdict is tested at half of
  the α the run has left, and the verdict after `--resume` at the rest, so interim and final looks
  together never exceed α (a user who resumes after an interim "not confirmed" cannot reach 2α).
  The final look is the run's decision, made once: however often the run is stopped after it (while
  its report is written) and resumed, it keeps that look, at its α and without a second registry
  line, and no interim look follows it.
- Across runs, every look is logged in the runs directory with its task, data draw and test-id
  hash (`test_verdicts.jsonl`); a report says how many decisions that test split has served (one
  per run: its looks together spend at most α) and warns when the same split keeps deciding (each
  run at α on one split adds up to α to the family-wise error: draw another `--split-seed`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from prompttune.comparing.fairness import fingerprint
from prompttune.core.run_files import log_verdict, read_looks, read_verdict_registry, write_looks


@dataclass(frozen=True)
class Look:
    """One verdict on a test split."""

    run_dir: str
    task: str
    split_seed: int
    test_n: int
    test_hash: str
    kind: str  # "final" or "interim"
    alpha: float
    decision: str
    shipped: str
    at: float


def test_hash(test_ids: list[str]) -> str:
    return fingerprint(sorted(test_ids))


def recorded_looks(run_dir: Path) -> list[Look]:
    """The verdicts this run has made on its test split, in order."""
    return [Look(**look) for look in read_looks(run_dir)]


def spent_alpha(looks: list[Look]) -> float:
    """The α a run's interim verdicts spent. Its final look is not counted: that look spends the rest,
    and a resume that finds it recorded reuses it (`final_look`) rather than spending again."""
    return float(sum(look.alpha for look in looks if look.kind == "interim"))


def final_look(looks: list[Look]) -> Look | None:
    """The final verdict a session recorded before it stopped (while writing its report), if any."""
    return next((look for look in looks if look.kind == "final"), None)


def look_alpha(alpha: float, spent: float, interim: bool) -> float:
    """The level of this look: half of what is left for an interim look, all of it for the final one."""
    left = alpha - spent
    return left / 2 if interim else left


def next_look_alpha(looks: list[Look], alpha: float, interim: bool) -> float:
    """The level of a run's next look, given the looks it recorded (`recorded_looks`). A recorded final
    look is reused at its level: the run has decided, and a resume of it that a signal cuts short makes no
    interim look (`run_steps.judge`), since that final look spent what the interim looks had left."""
    decided = final_look(looks)
    return decided.alpha if decided else look_alpha(alpha, spent_alpha(looks), interim)


def record_look(runs_dir: Path, run_dir: Path, look: Look) -> int:
    """Log the look in the run and in the runs directory; return how many decisions this test split
    has served there, this one included (`served_decisions`)."""
    write_looks(run_dir, [*read_looks(run_dir), asdict(look)])
    log_verdict(runs_dir, asdict(look))
    return served_decisions(runs_dir, look)


def served_decisions(runs_dir: Path, look: Look) -> int:
    """How many decisions the registry in `runs_dir` holds on the test split of `look` (its task and test ids):
    one per run, however many looks its resumes took, since a run's looks split its α and together add at most
    α to the family-wise error. A run is known by its directory's name, unique in `runs_dir` however a resume
    spelled the path (registries of older releases hold the same lines and count the same way)."""
    return len({Path(entry["run_dir"]).name for entry in read_verdict_registry(runs_dir)
                if entry["test_hash"] == look.test_hash and entry["task"] == look.task})


def new_look(run_dir: Path, task: str, split_seed: int, test_ids: list[str], interim: bool, alpha: float,
             decision: str, shipped: str) -> Look:
    return Look(str(run_dir), task, split_seed, len(test_ids), test_hash(test_ids),
                "interim" if interim else "final", alpha, decision, shipped, time.time())
