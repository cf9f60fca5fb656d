"""What a search's final stage held: every prompt a run raced there, tested on the run's test split.

Reads finished run directories (trial logs written from 81fa457 on, which carry the spec of every
prompt outside the grid), rebuilds each prompt that reached the final race (`final race` and `final`
trials: grid prompts from their dimension values in the run's space, written, swapped and calibrated
ones from their logged spec) and scores it on the run's test split with the run's model, scoring
`logit` (batch offsets applied). Per prompt: its dev accuracy over every dev example the run scored
it on, its test accuracy, and which one shipped. It tells a search that had a better prompt in hand and
picked another (selection) from one that never found one (generation). Then, on the dev prefix that
every final-stage prompt was scored on (answers read from the cache), what three ranking rules would
have picked, and that pick's test accuracy: accuracy with ties broken by the gold label's margin
(reflect's race score), the mean margin, and on two-label tasks the AUC of the label-score difference.
With `--whole-dev` every final-stage prompt is also scored on the whole dev split (calls the run's budget
did not pay for) and ranked there by reflect's race score: what a final race could pick if it could
afford every dev example for every prompt, the most any selection on this dev split can do.
An investigation, not a search: test labels are read only to report.

Run: PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/pool_ceiling.py RUN_DIR [RUN_DIR ...]
     [--cache runs/pool-ceiling.sqlite] [--whole-dev]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy.stats import mannwhitneyu

from prompttune.api import load_run
from prompttune.backends.factory import build_backend
from prompttune.core.types import Record
from prompttune.engine.setup import load_space
from prompttune.optimizers.reflect.race import race_score
from prompttune.results.finished_run import FinishedRun
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import Evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.prediction import LogitPredictor
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.tasks import Task, load_run_task
from prompttune.tasks.pools import exit_unless_tuning

FINAL_PURPOSES = ("final race", "final")


def auc(records: list[Record]) -> float:
    """Two labels: the chance that a label-1 example's score difference (label 1 minus label 0) exceeds a
    label-0 example's (Mann-Whitney, ties halved); threshold-free, so label bias does not enter."""
    diffs = np.array([r.label_logprobs[1] - r.label_logprobs[0] for r in records])
    gold = np.array([r.gold for r in records])
    ones, zeros = diffs[gold == 1], diffs[gold == 0]
    return float(mannwhitneyu(ones, zeros).statistic / (len(ones) * len(zeros)))


def accuracy(records: list[Record]) -> float:
    return float(np.mean([r.correct for r in records]))


def final_prompts(run: FinishedRun, task: Task
                  ) -> tuple[dict[str, PromptSpec], dict[str, float], dict[str, int], str]:
    """The specs of the prompts in the final stage, each one's dev accuracy over all its trials and how many
    dev examples that is, the shipped id."""
    space = load_space(run.config, task).bind(task.splits["train"])
    trials = run.trials
    correct: dict[str, float] = {}
    seen: dict[str, int] = {}
    specs: dict[str, PromptSpec] = {}
    for t in trials:
        key = t["candidate_id"]
        if t["purpose"] in ("reflection minibatch", "demo bootstrap"):
            continue  # train examples, not dev
        correct[key] = correct.get(key, 0.0) + t["accuracy"] * t["n"]
        seen[key] = seen.get(key, 0) + t["n"]
        if t["dimensions"]:
            specs.setdefault(key, space.build(space.assignment_of(t["dimensions"])).spec)
        elif "spec" in t:
            specs.setdefault(key, PromptSpec.from_dict(t["spec"]))
    finals = list(dict.fromkeys(t["candidate_id"] for t in trials if t["purpose"] in FINAL_PURPOSES))  # log order
    missing = set(finals) - set(specs)
    if missing:
        raise SystemExit(f"{run.run_dir}: no spec logged for {', '.join(sorted(missing))} (a log from before 81fa457?)")
    return ({k: specs[k] for k in finals}, {k: correct[k] / seen[k] for k in finals}, {k: seen[k] for k in finals},
            run.shipped.id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", type=Path, nargs="+")
    parser.add_argument("--cache", default="runs/pool-ceiling.sqlite")
    parser.add_argument("--whole-dev", action="store_true", help="also rank every final-stage prompt on the whole "
                        "dev split (scores what the run did not)")
    args = parser.parse_args()
    backend = None
    summary = []
    for run_dir in args.run_dirs:
        run = load_run(run_dir)
        config = run.config
        exit_unless_tuning(config.pool, [config.split_seed], f"pool_ceiling.py {run_dir}")
        task = load_run_task(config)
        backend = backend or build_backend(config)
        examples = {e.id: e for split in ("dev", "test") for e in task.splits[split]}
        evaluator = Evaluator(backend, examples, {e.id: e for e in task.splits["train"]},
                              ResultCache(args.cache), BudgetLedger())
        specs, dev, seen, shipped = final_prompts(run, task)
        test_ids = [e.id for e in task.splits["test"]]
        tested = {k: accuracy(LogitPredictor(evaluator).predict(spec, test_ids)) for k, spec in specs.items()}
        shared = [e.id for e in task.splits["dev"]][: min(seen.values())]
        on_dev = {k: LogitPredictor(evaluator).predict(spec, shared) for k, spec in specs.items()}
        rules = {"accuracy, ties by margin": lambda rs: race_score("tiebreak", rs, accuracy),
                 "mean margin": lambda rs: race_score("margin", rs, accuracy)}
        if len(task.labels) == 2:
            rules["AUC"] = auc
        print(f"{run_dir.name}: {len(specs)} prompts in the final stage, {len(test_ids)} test examples")
        leader = max(specs, key=lambda k: dev[k])
        for key in sorted(specs, key=lambda k: -dev[k]):
            mark = "  <- dev winner" if key == leader else ""
            print(f"  {key:24} dev {dev[key]:.3f}  test {tested[key]:.3f}{mark}"
                  f"{'  (shipped)' if key == shipped else ''}", flush=True)
        picks = {rule: tested[max(specs, key=lambda k: score(on_dev[k]))] for rule, score in rules.items()}
        print(f"  on the {len(shared)} dev examples all were scored on, the pick's test accuracy: "
              + ", ".join(f"{rule} {acc:.3f}" for rule, acc in picks.items()))
        if args.whole_dev:
            dev_ids = [e.id for e in task.splits["dev"]]
            whole = {k: race_score("tiebreak", LogitPredictor(evaluator).predict(spec, dev_ids), accuracy)
                     for k, spec in specs.items()}
            pick = max(specs, key=lambda k: whole[k])
            picks[f"whole dev ({len(dev_ids)})"] = tested[pick]
            print(f"  on the whole dev split ({len(dev_ids)}): {pick} leads at {whole[pick]:.3f}, test {tested[pick]:.3f}")
        summary.append((run_dir.name, tested[leader], max(tested.values()), picks))
    print("run: test accuracy of the final stage's dev leader / of its best prompt / of each rule's pick")
    for name, leader, best, picks in summary:
        print(f"  {name}: {leader:.3f} / {best:.3f} / " + ", ".join(f"{a:.3f}" for a in picks.values()))
    if summary:
        rules_mean = [np.mean([s[3][rule] for s in summary]) for rule in summary[0][3]]
        print(f"  mean: {np.mean([s[1] for s in summary]):.3f} / {np.mean([s[2] for s in summary]):.3f} / "
              + ", ".join(f"{a:.3f}" for a in rules_mean))


if __name__ == "__main__":
    main()
