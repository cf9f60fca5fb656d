"""Which part of a shipped prompt carries its gain, and what calibration does to label bias.

Takes a finished run directory (for example a `dspy-mipro` arm of `compare`) and scores, on its
split's test examples, the baseline and the shipped prompt taken apart: the baseline with the
shipped demos, the shipped instruction without demos, the shipped instruction with other
class-balanced demo sets, and the baseline with such a set. Each is read three ways: raw label
scores; batch calibration (Zhou et al. 2024: offsets = the mean normalised label log-probabilities
over the run's dev inputs, their labels unused, subtracted on test); contextual calibration (Zhao
et al. 2021: divided by the prompt's bias on content-free inputs). The share of test inputs given
the most frequent answer shows the label bias. An investigation of a run's split, not a search: it
reads test labels only to report accuracy.

Run: PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/calibration_probe.py RUN_DIR [--demo-seeds 12345,777]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from prompttune.api import load_run
from prompttune.backends.factory import build_backend
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import Evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.prediction import debiased, label_bias
from prompttune.search_spaces.demos import choose_demos
from prompttune.tasks import load_run_task
from prompttune.tasks.pools import exit_unless_tuning


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--demo-seeds", default="12345,777", help="draws of the other class-balanced demo sets")
    parser.add_argument("--cache", default="runs/calibration-probe.sqlite")
    args = parser.parse_args()
    run = load_run(args.run_dir)
    config = run.config
    exit_unless_tuning(config.pool, [config.split_seed], f"calibration_probe.py {args.run_dir}")
    task = load_run_task(config)
    examples = {e.id: e for split in ("dev", "test") for e in task.splits[split]}
    evaluator = Evaluator(build_backend(config), examples, {e.id: e for e in task.splits["train"]},
                          ResultCache(args.cache), BudgetLedger())
    base, shipped = run.baseline.spec, run.shipped.spec
    k = len(shipped.demo_ids) or 4
    variants = {"baseline": base, "shipped prompt": shipped,
                "baseline + shipped demos": base.with_updates(demo_ids=shipped.demo_ids),
                "shipped instruction, no demos": shipped.with_updates(demo_ids=())}
    for seed in (int(s) for s in args.demo_seeds.split(",")):
        other = choose_demos(task.splits["train"], k, "balanced", 0, seed)
        variants[f"shipped instruction + demo set {seed}"] = shipped.with_updates(demo_ids=other)
        variants[f"baseline + demo set {seed}"] = base.with_updates(demo_ids=other)
    dev, test = [e.id for e in task.splits["dev"]], [e.id for e in task.splits["test"]]
    print(f"{args.run_dir.name}: {len(dev)} dev inputs for the offsets, {len(test)} test examples")
    print(f"{'prompt':44} {'raw':>6} {'batch':>6} {'contextual':>10} {'top answer share':>17}")
    for name, spec in variants.items():
        records = evaluator.evaluate(spec, test)
        offsets = label_bias(evaluator.evaluate(spec, dev))
        batch = [int(np.argmax(debiased(r.label_logprobs, offsets))) == r.gold for r in records]
        contextual = evaluator.evaluate(spec.with_updates(calibrate=True), test)
        answers = np.bincount([r.pred for r in records if r.pred is not None], minlength=len(task.labels))
        print(f"{name:44} {np.mean([r.correct for r in records]):6.3f} {np.mean(batch):6.3f} "
              f"{np.mean([r.correct for r in contextual]):10.3f} {answers.max() / answers.sum():17.2f}", flush=True)


if __name__ == "__main__":
    main()
