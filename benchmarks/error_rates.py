"""Error rates and power of the verdict protocol, for every optimizer, on the synthetic oracle.

The oracle (a test device with known per-prompt accuracies, `prompttune.testing`) runs
through the real run engine, search driver and held-out verdict included (`prompttune.testing.
run_oracle` calls `prompttune.engine.study.run_study`): train 200 / dev 300 / test 1000, budget
3000 calls, base accuracy 0.6. Conditions:

- null: every prompt 0.6 accurate, coins independent across prompts, or correlated through a
  shared per-example difficulty (Gaussian copula, rho 0.5);
- +5 / +10 points: prompts that say "Pick" or carry two or more demos are better by that much
  (every optimizer can reach one: word slot, proposed instruction or demo set);
- +10-rare: better prompts are rare: only "Pick" with the "Label:" output and the " | " separator,
  3 of the space's 54 prompts, are 10 points better (demos do not help), so the search must find
  three choices together before the verdict can confirm anything. The space (`error_rate_space`):
  verb slot (Name, Pick, State) × field (Input, Text, Item) × output (Answer, Label, Colour) ×
  separator ("\n", " | "), 3 × 3 × 3 × 2;
- +10-rare72: the same rule on a space of another shape (`error_rate_space_72`), so the power above
  is not one space's figure: a fourth output format ("Class:"), 3 × 3 × 4 × 2 = 72 prompts, of which
  the same 3 ("Pick", "Label:", " | ", any of the three fields) are 10 points better. The better
  prompts are 1 in 24 of the grid (1 in 18 of the 54), the output dimension has four values where
  the others have two or three, and an optimizer that writes its own "Pick" instruction still has to
  find 1 of 8 output × separator pairs (1 of 6 in the 54).

Reported with Clopper-Pearson 95% intervals: how often a run confirms (null: false confirm;
otherwise power = the shipped prompt is confirmed and truly better), how often the dev winner is
truly better, and, for cople and p2g, the share of dev sweeps with a false accept (null only).

Run from the repository root: python benchmarks/error_rates.py --seeds 200 --workers 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import get_args

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from statsmodels.stats.proportion import proportion_confint  # noqa: E402

from prompttune.core.config import DEFAULT_SERVE, Serve  # noqa: E402
from prompttune.testing import ERROR_RATE_SIZES, error_rate_run  # noqa: E402

OPTIMIZERS = ("random", "sh", "spread", "cople", "p2g", "bfrs", "mipro", "reflect")
CONDITIONS = {"null": (0.0, 0.0), "null-corr": (0.0, 0.5), "+5": (0.05, 0.0), "+10": (0.10, 0.0),
              "+5-corr": (0.05, 0.5), "+10-corr": (0.10, 0.5)}
RARE = "+10-rare"  # only 3 of the 54 prompts are better (prompttune.testing.is_better), by 10 points
RARE72 = "+10-rare72"  # the same 3-choice rule on the 72-prompt space (prompttune.testing.error_rate_space_72)
SHAPES = {RARE: "54", RARE72: "72"}  # rare condition: its space in prompttune.testing.ERROR_RATE_SPACES
ALL_CONDITIONS = (*CONDITIONS, *SHAPES)
BUDGET = 3000


def condition_args(condition: str) -> dict:
    """`error_rate_run`'s arguments for a condition: delta, rho, rare and the space's shape."""
    if condition in SHAPES:
        return {"delta": 0.10, "rho": 0.0, "rare": True, "shape": SHAPES[condition]}
    delta, rho = CONDITIONS[condition]
    return {"delta": delta, "rho": rho, "rare": False, "shape": "54"}


def one_run(job: tuple[str, str, int, str]) -> dict:
    name, condition, seed, serve = job
    return {"optimizer": name, "condition": condition, "seed": seed,
            **error_rate_run(name, BUDGET, seed, **condition_args(condition), serve=serve)}


def rate(k: int, n: int) -> str:
    low, high = proportion_confint(k, n, alpha=0.05, method="beta")
    return f"{k / n:.1%} [{low:.1%}, {high:.1%}]"


def table(results: list[dict], conditions: list[str], optimizers: list[str]) -> str:
    nulls = [c for c in conditions if c.startswith("null")]
    alts = [c for c in conditions if not c.startswith("null")]
    pooled = len(nulls) > 1
    head = ([f"false confirm, {c}" for c in nulls] + (["false confirm, all nulls"] if pooled else [])
            + [f"power, {c}" for c in alts] + ["sweeps with a false accept (nulls)"])
    lines = ["| optimizer | " + " | ".join(head) + " |", "| --- " * (len(head) + 1) + "|"]
    for name in optimizers:
        cells = []
        for c in [*nulls, *alts]:  # the header's order, whatever order --conditions gave
            runs = [r for r in results if r["optimizer"] == name and r["condition"] == c]
            key = "confirmed" if c.startswith("null") else "ships_better"
            cells.append(rate(sum(r[key] for r in runs), len(runs)) if runs else "–")
        null_runs = [r for r in results if r["optimizer"] == name and r["condition"] in nulls]
        if pooled:
            cells.insert(len(nulls), rate(sum(r["confirmed"] for r in null_runs), len(null_runs))
                         + f" of {len(null_runs):,}")
        sweeps = sum(r["sweeps"] for r in null_runs)
        cells.append(rate(sum(r["sweeps_with_accept"] for r in null_runs), sweeps) + f" of {sweeps}"
                     if sweeps else "– (no dev challenges)")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--optimizers", default=",".join(OPTIMIZERS))
    parser.add_argument("--conditions", default=",".join(ALL_CONDITIONS),
                        help="comma-separated, of: " + ", ".join(ALL_CONDITIONS) + " (the module docstring says what "
                             "each is; +10-rare is 3 better prompts of 54, +10-rare72 3 of 72, another shape)")
    parser.add_argument("--save", type=Path, help="write every run's outcome here as JSON lines")
    parser.add_argument("--serve", choices=get_args(Serve), default=DEFAULT_SERVE,
                        help="the contract every search and verdict scores in (default: optimize's)")
    args = parser.parse_args()
    optimizers, conditions = args.optimizers.split(","), args.conditions.split(",")
    if unknown := [c for c in conditions if c not in ALL_CONDITIONS]:
        parser.error(f"unknown condition {', '.join(unknown)} (known: {', '.join(ALL_CONDITIONS)})")
    jobs = [(o, c, s, args.serve) for o in optimizers for c in conditions for s in range(args.seeds)]
    started = time.time()
    with ProcessPoolExecutor(args.workers) as pool:
        results = list(pool.map(one_run, jobs, chunksize=8))
    if args.save:
        args.save.write_text("".join(json.dumps(r) + "\n" for r in results))
    print(f"{len(jobs)} runs ({args.seeds} seeds × {len(optimizers)} optimizers × {len(conditions)} conditions), "
          f"budget {BUDGET}, dev {ERROR_RATE_SIZES.dev}, test {ERROR_RATE_SIZES.test}, α = 0.05 (test), "
          f"dev α = 0.10 per sweep, serve {args.serve}; {time.time() - started:.0f} s\n")
    print(table(results, conditions, optimizers))
    leader = {c: sum(r["leader_better"] for r in results if r["condition"] == c) for c in conditions}
    per = len(optimizers) * args.seeds
    print("\nDev winner truly better (all optimizers pooled): "
          + ", ".join(f"{c} {leader[c] / per:.1%}" for c in conditions if not c.startswith("null")))


if __name__ == "__main__":
    main()
