"""What the budget buys: a finished `optimize` run's dev pick at smaller spends, each tested on test.

A run records its dev leader at every change (`leaders.jsonl`: calls, tokens, prompt). Stopping the
same run at S calls would have handed on the leader it had then; this script scores that prompt on
the run's own test split (the same draw, through the run's cache where it has the answers) and
compares it with the baseline there (exact one-sided McNemar, as the verdict does, but without its
alpha: these are looks at a curve, not decisions). Only the last row is the run's verdict.

Run: PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/budget_curve.py RUN_DIR
     [--at 2000,5000,10000,20000,40000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prompttune.backends.factory import build_backend  # noqa: E402
from prompttune.core.run_files import CACHE, read_leaders, read_prompt  # noqa: E402
from prompttune.results.run_record import read_run_config  # noqa: E402
from prompttune.scoring.cache import ResultCache  # noqa: E402
from prompttune.scoring.evaluator import Evaluator  # noqa: E402
from prompttune.scoring.ledger import BudgetLedger  # noqa: E402
from prompttune.search_spaces.prompt import PromptSpec  # noqa: E402
from prompttune.statistics.stats import paired_compare, wilson_ci  # noqa: E402
from prompttune.tasks import load_run_task  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--at", default="2000,5000,10000,20000,40000", help="spends, in search calls")
    args = parser.parse_args()
    config = read_run_config(args.run_dir)
    task = load_run_task(config)
    leaders = read_leaders(args.run_dir)
    baseline = PromptSpec.from_dict(read_prompt(args.run_dir, "baseline")["spec"])
    backend = build_backend(config)
    cache = ResultCache(config.cache or args.run_dir / CACHE)
    test = [ex.id for ex in task.splits["test"]]
    evaluator = Evaluator(backend, {ex.id: ex for ex in task.splits["test"]},
                          {ex.id: ex for ex in task.splits["train"]}, cache, BudgetLedger(), scoring=config.scoring)

    def correct(spec: PromptSpec) -> list[bool]:
        return [r.correct for r in evaluator.evaluate(spec, test)]

    base = correct(baseline)
    print(f"{args.run_dir}: {config.optimizer} on {config.task}, budget {config.budget}, test {len(test)} examples; "
          f"baseline test accuracy {sum(base) / len(base):.3f}")
    print("| stopped at (calls) | dev pick changed at | test accuracy [Wilson 95%] | gain | one-sided p vs baseline |")
    print("| --- | --- | --- | --- | --- |")
    for spend in (int(s) for s in args.at.split(",") if int(s) <= config.budget):
        taken = [leader for leader in leaders if leader["calls"] <= spend]
        spec = PromptSpec.from_dict(taken[-1]["spec"]) if taken else baseline
        right = correct(spec)
        low, high = wilson_ci(sum(right), len(right))
        pair = paired_compare(right, base)
        print(f"| {spend} | {taken[-1]['calls'] if taken else '–'} | {sum(right) / len(right):.3f} "
              f"[{low:.3f}, {high:.3f}] | {pair.diff:+.3f} | {pair.p_one_sided:.2g} |", flush=True)
    cache.close()
    print(f"model calls made: {evaluator.ledger.computed_calls} (the rest came from the run's cache)")


if __name__ == "__main__":
    main()
