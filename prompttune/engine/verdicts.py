"""The test split is spent once per decision.

Every held-out verdict is a look at a test split. Two bookkeeping rules keep the error honest:

- Within a run, α is spent, not reused: an interrupted run's interim verdict is tested at half of
  the α the run has left, and the verdict after `--resume` at the rest, so interim and final looks
  together never exceed α (a user who resumes after an interim "not confirmed" cannot reach 2α).
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


def spent_alpha(run_dir: Path) -> float:
    """The α this run's earlier (interim) verdicts spent."""
    looks = read_json(run_dir / RUN_LOOKS) if (run_dir / RUN_LOOKS).is_file() else []
    return float(sum(look["alpha"] for look in looks))


def look_alpha(alpha: float, spent: float, interim: bool) -> float:
    """The level of this look: half of what is left for an interim look, all of it for the final one."""
    left = alpha - spent
    return left / 2 if interim else left


def record_look(runs_dir: Path, run_dir: Path, look: Look) -> int:
    """Log the look in the run and in the runs directory; return how many verdicts this test split
    has served there, this one included."""
    run_looks = read_json(run_dir / RUN_LOOKS) if (run_dir / RUN_LOOKS).is_file() else []
    write_atomic(run_dir / RUN_LOOKS, json.dumps([*run_looks, asdict(look)], indent=2))
    registry = runs_dir / REGISTRY
    with open(registry, "a", encoding="utf-8") as log:
        log.write(json.dumps(asdict(look)) + "\n")
    return sum(1 for line in registry.read_text(encoding="utf-8").splitlines()
               if line.strip() and json.loads(line)["test_hash"] == look.test_hash
               and json.loads(line)["task"] == look.task)


def new_look(run_dir: Path, task: str, split_seed: int, test_ids: list[str], interim: bool, alpha: float,
             decision: str, shipped: str) -> Look:
    return Look(str(run_dir), task, split_seed, len(test_ids), test_hash(test_ids),
                "interim" if interim else "final", alpha, decision, shipped, time.time())
