"""Do demos whose inputs look like the task's inputs help? Demo sets drawn from all of train against sets drawn
from train examples as long as the middle half of the dev inputs (reflect's `demo_pool=like-dev`), and from
those at least as long as the dev inputs' lower quartile (no upper bound).

On sst2 the train split is the phrases of the SST parse trees (median 7 words) while dev and test are whole
sentences (19-20): a demo drawn from train as it comes is mostly a fragment. For each pool, `--sets`
class-balanced sets of `--k` demos go into the task's default prompt, scored on the first `--dev` dev
examples of a split seed, raw and batch-calibrated on those same inputs (labels unused for the offsets).
Dev only: no test example is read.

Run: PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/demo_lengths.py --task sst2 --split-seed 6 --dev 300 --sets 10
"""

from __future__ import annotations

import argparse

import numpy as np

from prompttune.backends.factory import build_backend
from prompttune.core.config import RunConfig
from prompttune.core.types import input_words
from prompttune.engine.setup import load_space
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import Evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.prediction import LogitPredictor, debiased, label_bias
from prompttune.search_spaces.demos import choose_demos
from prompttune.tasks import load_run_task
from prompttune.tasks.pools import exit_unless_tuning


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--split-seed", type=int, default=6)
    parser.add_argument("--dev", type=int, default=300, help="dev examples scored (the dev split's size too)")
    parser.add_argument("--sets", type=int, default=10, help="demo sets per pool")
    parser.add_argument("--k", type=int, default=4, help="demos per set")
    parser.add_argument("--cache", default="runs/demo-lengths.sqlite")
    args = parser.parse_args()
    config = RunConfig(task=args.task, split_seed=args.split_seed, dev_size=args.dev, test_size=100)
    exit_unless_tuning(config.pool, [config.split_seed], "demo_lengths.py")
    task = load_run_task(config)
    train, dev = task.splits["train"], task.splits["dev"]
    evaluator = Evaluator(build_backend(config), {e.id: e for e in dev}, {e.id: e for e in train},
                          ResultCache(args.cache), BudgetLedger())
    base = load_space(config, task).bind(train).default_candidate().spec
    dev_words, train_words = [input_words(e) for e in dev], [input_words(e) for e in train]
    low, high = np.percentile(dev_words, [25, 75])
    print(f"{args.task}, split seed {args.split_seed}: input words, median train {np.median(train_words):.0f}, "
          f"dev {np.median(dev_words):.0f} (middle half {low:.0f}-{high:.0f})")
    pools = {"all of train": train, "like dev": [e for e in train if low <= input_words(e) <= high],
             "dev's lower quartile and longer": [e for e in train if input_words(e) >= low]}
    ids = [e.id for e in dev]
    for name, pool in pools.items():
        raw, calibrated = [], []
        for number in range(args.sets):
            spec = base.with_updates(demo_ids=choose_demos(pool, args.k, "balanced", 0, 1000 + number))
            records = LogitPredictor(evaluator).predict(spec, ids)
            offsets = label_bias(records)
            raw.append(np.mean([r.correct for r in records]))
            calibrated.append(np.mean([int(np.argmax(debiased(r.label_logprobs, offsets))) == r.gold for r in records]))
        print(f"{name} ({len(pool)} examples): raw {np.mean(raw):.3f}, batch-calibrated {np.mean(calibrated):.3f} "
              f"(sd over sets {np.std(calibrated, ddof=1):.3f}; {args.sets} sets of {args.k} on {len(ids)} dev examples)",
              flush=True)


if __name__ == "__main__":
    main()
