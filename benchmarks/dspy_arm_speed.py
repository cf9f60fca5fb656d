"""Calls per second of one DSPy arm on the real model, its threads served one request at a time
(threads=1) and gathered into batches by the metered engine (threads=N).

One arm-seed (default dspy-gepa at a cap of 300) through the run engine, exactly as a compare arm
runs (`prompttune.engine.study.run_study`: the arm's ledger and cache view, DSPy's settings sized to
the cap, the held-out verdict), on the model of `RunConfig`'s defaults (the embedded model on the
CPU, logit scoring) and the task's data from $PROMPTTUNE_DATA_DIR, once with DSPy's `threads=1`
(one request at a time) and once with `threads=N` (the metered engine gathers the threads' calls
into batches). Each runs on a fresh in-memory cache, so each computes every call it is charged.

Printed per thread count: calls the model computed (search and verdict), backend calls they came
in (and the largest batch), wall seconds, calls/s; then whether the runs matched: the same charges
(ledger: calls by kind and tokens), the same trial log (each program scored on the whole selection
set, with its score), the same program chosen and the same verdict. The engine serves a batch as it
would serve its requests alone; the model, though, computes a batch with padding, and in bf16 (what
`--dtype auto` picks on CPUs that run it natively) that moves log-probs by up to about 0.25 (README,
"Determinism"): a label can flip, GEPA's feedback quotes the log-probs, and from there the two runs
ask different questions. In fp32 they match.

The figures are only meaningful on an otherwise idle machine (one run at a time).

Run: PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/dspy_arm_speed.py [--arm dspy-gepa]
     [--cap 300] [--threads 32] [--seed 0] [--valset-size 100] [--train-size 1000] [--dev-size 300]
     [--test-size 200] [--dtype auto|bf16|fp32] [--backend transformers|vllm] [--model M] [--device D]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prompttune.dspy_bridge import require_dspy  # noqa: E402

require_dspy("benchmarks/dspy_arm_speed.py")

from prompttune.backends.factory import build_backend  # noqa: E402
from prompttune.core.config import RunConfig  # noqa: E402
from prompttune.core.types import GenerateRequest, ScoreRequest  # noqa: E402
from prompttune.dspy_bridge.arm import DspyOptions, Sizes  # noqa: E402
from prompttune.dspy_bridge.optimizers import DSPY_OPTIMIZERS  # noqa: E402
from prompttune.engine.study import run_study  # noqa: E402
from prompttune.results.run import RunResult  # noqa: E402
from prompttune.tasks import load_run_task  # noqa: E402


class Counting:
    """Wraps the backend: counts the requests it serves, the backend calls they came in, and the
    seconds spent scoring and generating (where the wall time goes)."""

    def __init__(self, inner) -> None:
        self.inner, self.model_id = inner, inner.model_id
        self.requests, self.batches = 0, []
        self.seconds = {"score": 0.0, "generate": 0.0}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _timed(self, kind: str, call, requests: list):
        self.requests += len(requests)
        self.batches.append(len(requests))
        start = time.perf_counter()
        try:
            return call(requests)
        finally:
            self.seconds[kind] += time.perf_counter() - start

    def score(self, requests: list[ScoreRequest]):
        return self._timed("score", self.inner.score, requests)

    def generate(self, requests: list[GenerateRequest]):
        return self._timed("generate", self.inner.generate, requests)


@dataclass
class Run:
    threads: int
    seconds: float
    result: RunResult
    batches: list[int]
    model_seconds: dict[str, float]

    @property
    def model_calls(self) -> int:
        """Calls the model computed, search and verdict (each thread count runs on a fresh cache)."""
        return self.result.search_ledger.computed_calls + self.result.confirm_ledger.calls


def compile_arm(config: RunConfig, task, backend: Counting, arm: str, options: dict, threads: int) -> Run:
    """One arm-seed through the run engine, as compare runs it, on a fresh in-memory cache."""
    backend.batches, backend.seconds = [], {"score": 0.0, "generate": 0.0}
    start = time.perf_counter()
    result = run_study(config.model_copy(update={"optimizer": arm, "optimizer_options": {**options, "threads": threads}}),
                       task=task, backend=backend, record=False)
    return Run(threads, time.perf_counter() - start, result, list(backend.batches), dict(backend.seconds))


def compare(one: Run, many: Run) -> list[str]:
    """Whether the batched run answered and charged as the one-at-a-time run did."""
    a, b = one.result, many.result
    same_charges = a.search_ledger.summary() == b.search_ledger.summary()
    return [f"same charges (calls by kind, tokens): {'yes' if same_charges else 'NO'}",
            f"same trials (programs scored on the whole selection set, in order, with their scores): "
            f"{'yes' if a.trials.load() == b.trials.load() else 'NO'}",
            f"same program chosen: {'yes' if a.dev_winner.spec == b.dev_winner.spec else 'NO'}; "
            f"same verdict: {'yes' if a.verdict.summary() == b.verdict.summary() else 'NO'}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arm", default="dspy-gepa", choices=sorted(DSPY_OPTIMIZERS))
    parser.add_argument("--cap", type=int, default=300)
    parser.add_argument("--threads", type=int, default=DspyOptions.model_fields["threads"].default,
                        help="DSPy's threads, and the largest batch (default: the arms' own)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--valset-size", type=int, default=None, help="the arm's valset_size (default: its own)")
    parser.add_argument("--train-size", type=int, default=RunConfig().train_size)
    parser.add_argument("--dev-size", type=int, default=RunConfig().dev_size)
    parser.add_argument("--test-size", type=int, default=200, help="the verdict's test examples")
    parser.add_argument("--dtype", default=RunConfig().dtype, choices=["auto", "bf16", "fp32"],
                        help="the model's dtype (auto: bf16 where the CPU runs it natively)")
    parser.add_argument("--backend", default=RunConfig().backend, choices=["transformers", "vllm"])
    parser.add_argument("--model", default=RunConfig().model)
    parser.add_argument("--device", default=RunConfig().device, help="transformers' device: cpu, cuda, ...")
    args = parser.parse_args()

    config = RunConfig(budget=args.cap, seed=args.seed, train_size=args.train_size, dev_size=args.dev_size,
                       test_size=args.test_size, backend=args.backend, model=args.model, device=args.device,
                       dtype=args.dtype, data_dir=os.environ.get("PROMPTTUNE_DATA_DIR"))
    options = {} if args.valset_size is None else {"valset_size": args.valset_size}
    task = load_run_task(config)
    backend = Counting(build_backend(config))
    print(f"{args.arm} at a cap of {args.cap} on {backend.describe()}, task {config.task} "
          f"(train {len(task.splits['train'])}, dev {len(task.splits['dev'])}), seed {args.seed}")
    print(DSPY_OPTIMIZERS[args.arm](args.cap, Sizes(len(task.splits["train"]), len(task.splits["dev"])),
                                    options).description)
    runs = [compile_arm(config, task, backend, args.arm, options, threads) for threads in (1, args.threads)]
    print(f"\n{'threads':>7} {'model calls':>11} {'backend calls':>13} {'largest':>7} {'seconds':>8} {'calls/s':>8} "
          f"{'scoring s':>9} {'generating s':>12}")
    for run in runs:
        print(f"{run.threads:>7} {run.model_calls:>11} {len(run.batches):>13} {max(run.batches, default=0):>7} "
              f"{run.seconds:>8.1f} {run.model_calls / run.seconds:>8.2f} {run.model_seconds['score']:>9.1f} "
              f"{run.model_seconds['generate']:>12.1f}"
              f"{'  (stopped by the cap)' if run.result.outcome.stopped_by_budget else ''}")
    print(f"speed-up: {runs[0].seconds / runs[1].seconds:.2f}x")
    print("\n".join(compare(*runs)))
    backend.inner.close()


if __name__ == "__main__":
    main()
