"""Calls per second of one DSPy arm on the real model, its threads served one request at a time
(threads=1) and gathered into batches by the metered engine (threads=N).

One arm-seed compile (default dspy-gepa at a cap of 300), set up as compare's `run_dspy_arm` sets
it up — the arm's ledger and cache view over train+dev, the train split in the seed's order, the
valset drawn from dev with the seed — on the model of `RunConfig`'s defaults (the embedded model
on the CPU, logit scoring) and the task's data from $PROMPTTUNE_DATA_DIR. Each thread count runs
on a fresh cache, so each computes every call it is charged.

Printed per thread count: calls charged, batches the backend received (and the largest), wall
seconds of the compile, calls/s; then whether the runs matched: the same charges (ledger: calls
by kind and tokens), the same program chosen, the same predicted label for every scored query
both runs asked (and the largest log-probability difference), the same generated texts. The
engine serves a batch as it would serve its requests alone; the model, though, computes a batch
with padding, and in bf16 (what `--dtype auto` picks on CPUs that run it natively) that moves
log-probs by up to about 0.25 (README, "Determinism"): a label can flip, GEPA's feedback quotes
the log-probs, and from there the two runs ask different questions. In fp32 they match.

The figures are only meaningful on an otherwise idle machine (one run at a time).

Run: PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/dspy_arm_speed.py [--arm dspy-gepa]
     [--cap 300] [--threads 8] [--seed 0] [--valset-size 100] [--train-size 1000] [--dev-size 300]
     [--dtype auto|bf16|fp32]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prompttune.dspy_bridge import require_dspy  # noqa: E402

require_dspy("benchmarks/dspy_arm_speed.py")

import dspy  # noqa: E402

from prompttune.backends.factory import build_backend  # noqa: E402
from prompttune.commands.common import load_run_task  # noqa: E402
from prompttune.core.config import RunConfig  # noqa: E402
from prompttune.core.types import GenerateRequest, ScoreRequest  # noqa: E402
from prompttune.dspy_bridge.adapter import PromptSpecAdapter  # noqa: E402
from prompttune.dspy_bridge.engine import BudgetStop, MeteredEngine  # noqa: E402
from prompttune.dspy_bridge.optimizers import DSPY_OPTIMIZERS, Sizes, Tools  # noqa: E402
from prompttune.dspy_bridge.program import ProgramMapping  # noqa: E402
from prompttune.evaluation.cache import ResultCache  # noqa: E402
from prompttune.evaluation.evaluator import Evaluator  # noqa: E402
from prompttune.evaluation.ledger import BudgetLedger  # noqa: E402
from prompttune.evaluation.metered_cache import MeteredCache  # noqa: E402
from prompttune.search_spaces import default_space  # noqa: E402


class Counting:
    """Wraps the backend: counts the requests it serves and the backend calls they came in."""

    def __init__(self, inner) -> None:
        self.inner, self.model_id = inner, inner.model_id
        self.requests, self.batches = 0, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def score(self, requests: list[ScoreRequest]):
        self.requests += len(requests)
        self.batches.append(len(requests))
        return self.inner.score(requests)

    def generate(self, requests: list[GenerateRequest]):
        self.requests += len(requests)
        self.batches.append(len(requests))
        return self.inner.generate(requests)


@dataclass
class Run:
    threads: int
    seconds: float
    ledger: BudgetLedger
    batches: list[int]
    stopped: bool
    chosen: object
    entries: dict[str, dict]


def compile_arm(config: RunConfig, task, backend, arm: str, options: dict, threads: int, log: Path) -> Run:
    train, dev = task.splits["train"], task.splits["dev"]
    settings = DSPY_OPTIMIZERS[arm](config.budget, Sizes(len(train), len(dev)), options)
    ledger = BudgetLedger(cap_calls=config.budget)
    cache = ResultCache()
    evaluator = Evaluator(backend, {e.id: e for e in [*train, *dev]}, {e.id: e for e in train},
                          MeteredCache(cache), ledger, scoring=config.scoring)
    baseline = default_space(task).default_candidate().spec
    mapping = ProgramMapping.build(baseline, task.input_fields, train, dev)
    rng = np.random.default_rng(config.seed)
    trainset = [mapping.example(train[i]) for i in rng.permutation(len(train))]
    valset = [mapping.example(dev[i]) for i in rng.permutation(len(dev))[:settings.valset_size]]
    engine = MeteredEngine(evaluator, seed=config.seed, threads=threads)
    lm = dspy.LM(f"prompttune/{config.model}", engine=engine, cache=False, num_retries=0, max_tokens=96)
    adapter = PromptSpecAdapter(mapping, engine)
    tools = Tools(lm, adapter, engine, mapping, config.seed, trainset, valset)
    backend.batches = []
    program, stopped = None, False
    logger = logging.getLogger("dspy")
    saved = logger.handlers[:], logger.propagate
    with open(log, "a", encoding="utf-8") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        logger.handlers, logger.propagate = [logging.StreamHandler(out)], False
        start = time.perf_counter()
        try:
            with dspy.context(lm=lm, adapter=adapter):
                program = settings.compile(mapping.program(baseline, []), tools)
        except BudgetStop:
            stopped = True
        finally:
            seconds = time.perf_counter() - start
            logger.handlers, logger.propagate = saved
    with cache._lock:
        entries = {key: json.loads(value) for key, value in cache._db.execute("SELECT key, value FROM results")}
    return Run(threads, seconds, ledger, list(backend.batches), stopped,
               None if program is None else mapping.spec_of(program), entries)


def compare(one: Run, many: Run) -> list[str]:
    """Whether the batched run answered and charged as the one-at-a-time run did."""
    lines = []
    same_charges = one.ledger.summary() == many.ledger.summary()
    lines.append(f"same charges (calls by kind, tokens): {'yes' if same_charges else 'NO'}"
                 + ("" if same_charges else f" ({one.ledger.summary()} vs {many.ledger.summary()})"))
    lines.append(f"same program chosen: {'yes' if one.chosen == many.chosen else 'NO'}"
                 f"{' (both stopped by the cap)' if one.stopped and many.stopped else ''}")
    both = one.entries.keys() & many.entries.keys()
    scored = [k for k in both if "logprobs" in one.entries[k]]
    labels = sum(int(np.argmax(one.entries[k]["logprobs"]) == np.argmax(many.entries[k]["logprobs"]))
                 for k in scored)
    gap = max((float(np.max(np.abs(np.subtract(one.entries[k]["logprobs"], many.entries[k]["logprobs"]))))
               for k in scored), default=0.0)
    texts = [k for k in both if "text" in one.entries[k]]
    same_texts = sum(one.entries[k]["text"] == many.entries[k]["text"] for k in texts)
    lines.append(f"same queries asked: {len(both)} shared, {len(one.entries) - len(both)} only with "
                 f"threads={one.threads}, {len(many.entries) - len(both)} only with threads={many.threads}")
    lines.append(f"same predicted label: {labels}/{len(scored)} scored queries (largest log-prob "
                 f"difference {gap:.2e}); same generated text: {same_texts}/{len(texts)}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arm", default="dspy-gepa", choices=sorted(DSPY_OPTIMIZERS))
    parser.add_argument("--cap", type=int, default=300)
    parser.add_argument("--threads", type=int, default=8, help="DSPy's threads, and the largest batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--valset-size", type=int, default=None, help="the arm's valset_size (default: its own)")
    parser.add_argument("--train-size", type=int, default=RunConfig().train_size)
    parser.add_argument("--dev-size", type=int, default=RunConfig().dev_size)
    parser.add_argument("--dtype", default=RunConfig().dtype, choices=["auto", "bf16", "fp32"],
                        help="the model's dtype (auto: bf16 where the CPU runs it natively)")
    parser.add_argument("--log", default="dspy_arm_speed.log", help="DSPy's own output goes here")
    args = parser.parse_args()

    config = RunConfig(budget=args.cap, seed=args.seed, train_size=args.train_size, dev_size=args.dev_size,
                       dtype=args.dtype, data_dir=os.environ.get("PROMPTTUNE_DATA_DIR"))
    options = {} if args.valset_size is None else {"valset_size": args.valset_size}
    task = load_run_task(config)
    backend = Counting(build_backend(config))
    print(f"{args.arm} at a cap of {args.cap} on {backend.describe()}, task {config.task} "
          f"(train {len(task.splits['train'])}, dev {len(task.splits['dev'])}), seed {args.seed}")
    print(DSPY_OPTIMIZERS[args.arm](args.cap, Sizes(len(task.splits["train"]), len(task.splits["dev"])),
                                    options).description)
    runs = [compile_arm(config, task, backend, args.arm, options, threads, Path(args.log))
            for threads in (1, args.threads)]
    print(f"\n{'threads':>7} {'calls':>6} {'backend calls':>13} {'largest':>7} {'seconds':>8} {'calls/s':>8}")
    for run in runs:
        print(f"{run.threads:>7} {run.ledger.calls:>6} {len(run.batches):>13} {max(run.batches, default=0):>7} "
              f"{run.seconds:>8.1f} {run.ledger.calls / run.seconds:>8.2f}"
              f"{'  (stopped by the cap)' if run.stopped else ''}")
    print(f"speed-up: {runs[0].seconds / runs[1].seconds:.2f}x")
    print("\n".join(compare(*runs)))
    backend.inner.close()


if __name__ == "__main__":
    main()
