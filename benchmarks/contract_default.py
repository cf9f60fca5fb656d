"""`optimize`'s default contract by the rule in docs/results/tuning_log.md ("`optimize`'s default contract").

Each finished run's shipped prompt is scored on the run's own test split twice: by label log-probabilities with
its offsets (what a user who reads log-probs gets) and by constrained decoding with its batch offsets as a
first-token `logit_bias` where the labels' first tokens are distinct, else without offsets (what a user who
deploys the prompt's export through structured outputs gets). Runs pair by task and split seed; the losses of a
user who leaves the default and deploys the other way are

  L_choice   = acc(choice run, by choice)     - acc(logprobs run, by choice)
  L_logprobs = acc(logprobs run, by logprobs) - acc(choice run, by logprobs)

and `choice` becomes the default if mean L_choice > mean L_logprobs.

Run: PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/contract_default.py [--jobs 2] RUN_DIR [RUN_DIR ...]
(--jobs: processes, each with its own model, scoring runs side by side; one thread each is the caller's
OMP_NUM_THREADS=1)
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from contextlib import closing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prompttune.api import load_run  # noqa: E402
from prompttune.backends.factory import build_backend  # noqa: E402
from prompttune.core.run_files import CACHE  # noqa: E402
from prompttune.scoring import contract  # noqa: E402
from prompttune.scoring.cache import ResultCache  # noqa: E402
from prompttune.scoring.evaluator import build_evaluator  # noqa: E402
from prompttune.scoring.ledger import BudgetLedger  # noqa: E402
from prompttune.tasks import load_run_task  # noqa: E402

CONTRACTS = ("logprobs", "choice")
_BACKEND = None  # each worker process's model, built once by open_backend


def open_backend(run_dir: Path) -> None:
    global _BACKEND
    _BACKEND = build_backend(load_run(run_dir).config)


def test_accuracies(run_dir: Path) -> tuple[str, int, str, dict[str, float]]:
    """(task, split seed, the run's contract, {contract: the shipped prompt's test accuracy served that way})."""
    backend = _BACKEND
    run = load_run(run_dir)
    task = load_run_task(run.config)
    test = task.splits["test"]
    accuracy = {}
    with closing(ResultCache(run.config.cache or run_dir / CACHE)) as cache:
        for serve in CONTRACTS:
            spec = run.shipped.spec
            if not contract.admits(serve, backend, spec):  # offsets production cannot apply are dropped
                spec = dataclasses.replace(spec, calibrate=False, label_bias=())
            config = run.config.model_copy(update={"serve": serve})
            evaluator = build_evaluator(config, backend, test, task.splits["train"], cache, BudgetLedger())
            records = evaluator.evaluate(spec, [ex.id for ex in test])
            accuracy[serve] = sum(r.correct for r in records) / len(records)
    return run.config.task, run.config.split_seed, run.config.contract, accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dirs", type=Path, nargs="+")
    parser.add_argument("--jobs", type=int, default=1, help="processes scoring runs side by side")
    args = parser.parse_args()
    print("Each run in its own contract (its verdict):\n")
    print("| run | task | split seed | contract | baseline test acc | shipped test acc | gain | leader's one-sided p "
          "| confirmed |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for run_dir in args.run_dirs:
        run = load_run(run_dir)
        verdict = run.facts["verdict"]  # verdict.json as the run wrote it
        tested = verdict["tested"]
        leader = tested[0]["confirmation"] if tested else verdict["baseline_only"]
        shipped = next((t["confirmation"] for t in tested if t["confirmed"]), verdict["baseline_only"])
        print(f"| {run_dir.name} | {run.config.task} | {run.config.split_seed} | {run.config.contract} | "
              f"{shipped['baseline_accuracy']:.3f} | {shipped['best_accuracy']:.3f} | {shipped['gain']:+.3f} | "
              f"{leader['comparison']['p_one_sided']:.3g} | {'yes' if run.confirmed else 'no'} |")
    print("\nEach run's shipped prompt served both ways:\n")
    by_draw: dict[tuple[str, int], dict[str, dict[str, float]]] = {}
    print("| run | task | split seed | searched under | test acc by logprobs | test acc by choice |")
    print("| --- | --- | --- | --- | --- | --- |")
    with ProcessPoolExecutor(args.jobs, initializer=open_backend, initargs=(args.run_dirs[0],)) as pool:
        for run_dir, (task, seed, searched, accuracy) in zip(args.run_dirs, pool.map(test_accuracies, args.run_dirs)):
            by_draw.setdefault((task, seed), {})[searched] = accuracy
            print(f"| {run_dir.name} | {task} | {seed} | {searched} | {accuracy['logprobs']:.3f} | "
                  f"{accuracy['choice']:.3f} |", flush=True)
    paired = {draw: runs for draw, runs in by_draw.items() if set(runs) == set(CONTRACTS)}
    print("\n| task | split seed | L_choice | L_logprobs |\n| --- | --- | --- | --- |")
    l_choice, l_logprobs = [], []
    for (task, seed), runs in sorted(paired.items()):
        l_choice.append(runs["choice"]["choice"] - runs["logprobs"]["choice"])
        l_logprobs.append(runs["logprobs"]["logprobs"] - runs["choice"]["logprobs"])
        print(f"| {task} | {seed} | {l_choice[-1]:+.3f} | {l_logprobs[-1]:+.3f} |")
    if not paired:
        sys.exit("no task and split seed has both a logprobs and a choice run")
    mean_choice, mean_logprobs = statistics.mean(l_choice), statistics.mean(l_logprobs)
    default = "choice" if mean_choice > mean_logprobs else "logprobs"
    print(f"\nmean over {len(paired)} task-seeds: L_choice {mean_choice:+.4f}, L_logprobs {mean_logprobs:+.4f} "
          f"-> default: {default}")


if __name__ == "__main__":
    main()
