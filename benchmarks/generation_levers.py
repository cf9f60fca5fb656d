"""Which lever makes the model answer with a label when it generates: the default space's baseline, the same with
the chat template on (its cue as the assistant's prefill), with one train demo per label, and both, each served by
greedy generation (`serve: generate`) on the first N dev examples of a task's tuning draw; valid answers and
accuracy per prompt.

Run: PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/generation_levers.py agnews 60 [--split-seed 0]
"""

from __future__ import annotations

import argparse
import sys
from contextlib import closing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prompttune.backends.factory import build_backend  # noqa: E402
from prompttune.core.config import RunConfig  # noqa: E402
from prompttune.scoring.cache import ResultCache  # noqa: E402
from prompttune.scoring.evaluator import build_evaluator  # noqa: E402
from prompttune.scoring.ledger import BudgetLedger  # noqa: E402
from prompttune.search_spaces import default_space  # noqa: E402
from prompttune.tasks import load_run_task  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("task")
    parser.add_argument("n", type=int)
    parser.add_argument("--split-seed", type=int, default=0)
    args = parser.parse_args()
    config = RunConfig(task=args.task, pool="tuning", split_seed=args.split_seed, serve="generate")
    task = load_run_task(config)
    base = default_space(task).bind(task.splits["train"]).default_candidate().spec
    one_per_label = tuple(next(ex.id for ex in task.splits["train"] if ex.label == label)
                          for label in range(len(task.labels)))
    prompts = {"baseline": base, "chat": base.with_updates(chat=True),
               "demos": base.with_updates(demo_ids=one_per_label),
               "chat + demos": base.with_updates(chat=True, demo_ids=one_per_label)}
    dev = task.splits["dev"][:args.n]
    backend = build_backend(config)
    print(f"| prompt | valid answers | accuracy by generation |  ({task.name}, first {len(dev)} dev examples)")
    print("| --- | --- | --- |")
    with closing(ResultCache()) as cache:
        evaluator = build_evaluator(config, backend, dev, task.splits["train"], cache, BudgetLedger())
        for name, spec in prompts.items():
            records = evaluator.evaluate(spec, [ex.id for ex in dev])
            valid = sum(r.pred is not None for r in records) / len(records)
            print(f"| {name} | {valid:.2f} | {sum(r.correct for r in records) / len(records):.2f} |", flush=True)
    backend.close()


if __name__ == "__main__":
    main()
