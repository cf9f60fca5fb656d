"""The main job at full size, timed against the hardware: wall time and the achieved fraction of the FLOP bound.

Runs what `optimize --task agnews --budget 40000` runs (the same RunConfig defaults: the default
optimizer, space, splits and dtype), in-process through `prompttune.optimize`, so that the backend's
`tokens_processed` (tokens actually run through the model: prefix reuse and cache hits excluded)
can be read when it ends. Before the run it measures the torch.matmul peak of the run's dtype with
the same threads (`throughput.py`'s `matmul_peak`). It prints:

- wall seconds of the whole job (model load, search, held-out verdict, reports);
- the FLOP bound: 2 x non-embedding parameters x tokens run, over the matmul peak: the seconds the
  job's matmuls would take at peak; achieved fraction = that bound / wall;
- the same for the tokens the ledger charged (every prompt token of every call, as if nothing were
  reused): how far prefix reuse and the cache put the job beyond the naive bound.

What the budget buys (the shipped prompt's test accuracy when the run stops at 2k ... 40k calls):
`python benchmarks/budget_curve.py RUN_DIR` on the run directory this prints.

Run alone (another torch process on the same cores slows both several times):
PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/main_job.py [--budget 40000] [--task agnews]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import prompttune  # noqa: E402
from benchmarks.throughput import layer_params, matmul_peak  # noqa: E402
from prompttune.backends.factory import build_backend  # noqa: E402
from prompttune.backends.transformers_backend import TransformersBackend  # noqa: E402
from prompttune.backends.transformers_setup import resolve_dtype  # noqa: E402
from prompttune.core.config import RunConfig  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="agnews")
    parser.add_argument("--budget", type=int, default=40000)
    parser.add_argument("--runs-dir", default="runs")
    args = parser.parse_args()
    config = RunConfig(task=args.task, budget=args.budget, runs_dir=args.runs_dir)
    start = time.perf_counter()
    backend = build_backend(config)
    if not isinstance(backend, TransformersBackend):
        raise SystemExit("main_job.py times the in-process transformers backend only")
    peak = matmul_peak(resolve_dtype(config.dtype, config.device), config.device, time.perf_counter)
    result = prompttune.optimize(args.task, optimizer=config.optimizer, budget=args.budget, backend=backend,
                                 runs_dir=args.runs_dir, progress=True)
    wall = time.perf_counter() - start
    params = layer_params(backend)
    charged = result.search_ledger.tokens + result.confirm_ledger.tokens
    run = backend.tokens_processed
    print(f"main job: optimize --task {args.task} --budget {args.budget} (optimizer {config.optimizer}, "
          f"{backend.model_id}, {torch.get_num_threads()} threads); run directory {result.run_dir}")
    print(f"wall {wall:.0f} s ({wall / 60:.1f} min); {result.verdict.summary()}")
    print(f"matmul peak {peak:.0f} GFLOP/s; {params / 1e6:.1f} M non-embedding parameters")
    for name, tokens in (("tokens run", run), ("tokens charged", charged)):
        bound = 2 * params * tokens / (peak * 1e9)
        print(f"{name}: {tokens:,}; FLOP bound {bound:.0f} s; achieved fraction of the bound "
              f"{bound / wall:.1%} ({2 * params * tokens / wall / 1e9:.0f} GFLOP/s)")


if __name__ == "__main__":
    main()
