"""Does a prediction depend on the requests batched with it? The determinism guarantee rests on it.

The same agnews dev requests (the default prompt zero-shot, and with two train demos) are label-scored
by the transformers backend in batches of 1 and of 16, per dtype; printed per prompt: the largest
log-prob difference between the two, how many argmax labels differ, and the smallest top-two label
gaps (a label flips only where its gap is below the difference). The suite keeps the fp32 half as a
test (tests/test_prefix_reuse.py).

Run: PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/batch_invariance.py [--n 64] [--dtypes fp32,bf16]
"""

from __future__ import annotations

import argparse

import numpy as np

from prompttune.backends.transformers_backend import TransformersBackend
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import Evaluator, Output
from prompttune.scoring.ledger import BudgetLedger
from prompttune.search_spaces import default_space
from prompttune.tasks import SplitSizes, load_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=64, help="dev examples per prompt")
    parser.add_argument("--dtypes", default="fp32,bf16")
    args = parser.parse_args()
    task = load_task("agnews", None, SplitSizes(50, args.n, 50))
    train = {e.id: e for e in task.splits["train"]}
    dev = {e.id: e for e in task.splits["dev"]}
    base = default_space(task).bind(task.splits["train"]).default_candidate().spec
    prompts = {"zero-shot": base, "2 demos": base.with_updates(demo_ids=tuple(list(train)[:2]))}
    for dtype in args.dtypes.split(","):
        backend = TransformersBackend(dtype=dtype)

        def scored(batch_size: int) -> dict[str, list[Output]]:
            backend.batch_size = batch_size  # a fresh cache each time, so every request reaches the model
            evaluator = Evaluator(backend, dev, train, ResultCache(), BudgetLedger())
            return {name: evaluator.outputs(spec, list(dev), "score") for name, spec in prompts.items()}

        alone, batched = scored(1), scored(16)
        for name in prompts:
            pairs = [(np.array(a.logprobs), np.array(b.logprobs)) for a, b in zip(alone[name], batched[name])]
            diff = max(float(np.abs(a - b).max()) for a, b in pairs)
            flips = sum(int(a.argmax()) != int(b.argmax()) for a, b in pairs)
            gaps = sorted(float(np.diff(np.sort(a)[-2:])[0]) for a, _ in pairs)[:3]
            print(f"{backend.model_id} · {name}: max |Δ log-prob| {diff:.3g}, argmax differs on {flips}/{len(pairs)}, "
                  f"smallest top-two gaps {', '.join(f'{g:.3g}' for g in gaps)}")
        backend.close()


if __name__ == "__main__":
    main()
