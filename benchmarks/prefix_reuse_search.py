"""One whole search before and after shared-prefix reuse: wall time, and whether the result is the same.

Runs `optimize` twice in this process with the same config and seed (default: mipro on agnews,
budget 2000, the default splits; budget for a long first run: benchmarks/throughput.py measured
the full-prompt path at 2.2 prompts/s on 4-demo prompts in fp32 on 2 CPU cores), first with the
transformers backend's full-prompt path (`prefix_reuse=False`), then with prefix reuse, each with
its own empty cache, and prints the wall time of each search and verdict, the speed-up, and
whether the trials (candidates, dev scores), the dev winner, what ships and the verdict agree. Run
it alone on the machine: its figures are wall times.

Run: PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/prefix_reuse_search.py [--optimizer mipro]
     [--budget 2000] [--dtype auto]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from rich.console import Console

from prompttune.backends.transformers_backend import TransformersBackend
from prompttune.core.config import RunConfig
from prompttune.engine.study import run_study
from prompttune.results.run import RunResult


def trials(result: RunResult) -> list[tuple]:
    """What a search decided, trial by trial: each trial's candidate and dev score."""
    return [(row["candidate_id"], row.get("instruction"), row["n"], row["score"]) for row in result.trials.load()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="agnews")
    parser.add_argument("--optimizer", default="mipro")
    parser.add_argument("--budget", type=int, default=2000)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-size", type=int, default=1000, help="the verdict's examples (calls: twice this)")
    args = parser.parse_args()
    config = RunConfig(task=args.task, optimizer=args.optimizer, budget=args.budget, dtype=args.dtype,
                       seed=args.seed, test_size=args.test_size)
    results: dict[bool, RunResult] = {}
    with tempfile.TemporaryDirectory() as runs_dir:
        for reuse in (False, True):
            backend = TransformersBackend(config.model, dtype=config.dtype, prefix_reuse=reuse)
            results[reuse] = run_study(config.model_copy(update={"runs_dir": str(Path(runs_dir) / str(reuse))}),
                                              backend=backend, console=Console(quiet=True))
            result = results[reuse]
            print(f"prefix_reuse={reuse}: {result.wall_seconds:.0f} s for {result.search_ledger.calls} search + "
                  f"{result.confirm_ledger.calls} test calls; {backend.tokens_processed} tokens run; "
                  f"dev winner {result.verdict.dev_winner.id}, ships {result.shipped.id} "
                  f"({result.verdict.summary()})", flush=True)
        before, after = results[False], results[True]
        same = {"trials": trials(before) == trials(after),
                "dev winner": before.verdict.dev_winner.id == after.verdict.dev_winner.id,
                "shipped": before.shipped.id == after.shipped.id,
                "verdict": before.verdict.summary() == after.verdict.summary()}
    print(f"{args.optimizer} --budget {args.budget} on {args.task}, {backend.describe()}: "
          f"{before.wall_seconds / after.wall_seconds:.2f}x faster with prefix reuse; same "
          + ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in same.items()))


if __name__ == "__main__":
    main()
