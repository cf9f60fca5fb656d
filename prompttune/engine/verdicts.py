"""The test split is spent once per decision.

Every held-out verdict is a look at a test split. Two bookkeeping rules keep the error honest:

- Within a run, α is spent, not reused: an interrupted run's interim verdict is tested at half of
  the α the run has left, and the verdict after `--resume` at the rest, so interim and final looks
  together never exceed α (a user who resumes after an interim "not confirmed" cannot reach 2α).
  The final look is the run's decision, made once: a run stopped after it (while its report is
  written) resumes to that same look, at its α and without a second registry line.
- Across runs, every verdict is logged in the runs directory with its task, data draw and test-id
  hash (`test_verdicts.jsonl`); a report says how many verdicts that test split has served and
  warns when the same split keeps deciding (each run at α on one split adds up to α to the
  family-wise error: draw another `--split-seed`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from prompttune.comparing.fairness import fingerprint
from prompttune.core.storage import read_json, write_atomic

REGISTRY = "test_verdicts.jsonl"  # in the runs directory
RUN_LOOKS = "test_looks.json"  # in the run directory: the α this run has spent on its test split


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
    return [Look(**look) for look in read_json(run_dir / RUN_LOOKS)] if (run_dir / RUN_LOOKS).is_file() else []


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
    look is reused at its level; an interim look after it (a resume stopped again before its end) gets
    nothing, since that final look already spent what the interim looks had left."""
    decided = final_look(looks)
    if decided:
        return 0.0 if interim else decided.alpha
    return look_alpha(alpha, spent_alpha(looks), interim)


def record_look(runs_dir: Path, run_dir: Path, look: Look) -> int:
    """Log the look in the run and in the runs directory; return how many verdicts this test split
    has served there, this one included."""
    run_looks = read_json(run_dir / RUN_LOOKS) if (run_dir / RUN_LOOKS).is_file() else []
    write_atomic(run_dir / RUN_LOOKS, json.dumps([*run_looks, asdict(look)], indent=2))
    with open(runs_dir / REGISTRY, "a", encoding="utf-8") as log:
        log.write(json.dumps(asdict(look)) + "\n")
    return served_verdicts(runs_dir, look)


def served_verdicts(runs_dir: Path, look: Look) -> int:
    """How many verdicts the registry in `runs_dir` holds on the test split of `look` (its task and test ids)."""
    entries = [json.loads(line) for line in (runs_dir / REGISTRY).read_text(encoding="utf-8").splitlines()
               if line.strip()]
    return sum(1 for entry in entries if entry["test_hash"] == look.test_hash and entry["task"] == look.task)


def new_look(run_dir: Path, task: str, split_seed: int, test_ids: list[str], interim: bool, alpha: float,
             decision: str, shipped: str) -> Look:
    return Look(str(run_dir), task, split_seed, len(test_ids), test_hash(test_ids),
                "interim" if interim else "final", alpha, decision, shipped, time.time())
