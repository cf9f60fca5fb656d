"""Label-scoring throughput of the transformers backend (prompts/s) for fp32 and bf16.

Run: PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/throughput.py [--n 256] [--batch-size 32]
     [--device cuda] [--model DIR]
"""

from __future__ import annotations

import argparse
import time

from prompttune.backends.transformers_backend import EMBEDDED_MODEL, TransformersBackend
from prompttune.core.types import ScoreRequest
from prompttune.search_spaces import default_space, render
from prompttune.tasks import SplitSizes, load_task


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--model", default=EMBEDDED_MODEL, help="HF id, local directory or .gguf file")
    args = parser.parse_args()
    task = load_task("agnews", None, SplitSizes(10, 10, args.n))
    spec = default_space(task).default_candidate().spec
    prompts = [render(spec, ex, []) for ex in task.splits["test"]]
    for dtype in args.dtypes.split(","):
        backend = TransformersBackend(args.model, dtype=dtype, device=args.device, batch_size=args.batch_size)
        requests = [ScoreRequest(backend.to_text(p), p.label_continuations) for p in prompts]
        backend.score(requests[: args.batch_size])  # warm-up
        start = time.perf_counter()
        results = backend.score(requests)
        seconds = time.perf_counter() - start
        tokens = sum(r.prompt_tokens for r in results) / len(results)
        print(f"{args.device} {dtype}: {len(requests) / seconds:.1f} prompts/s "
              f"({len(requests)} prompts, mean {tokens:.0f} prompt tokens, batch {args.batch_size})")


if __name__ == "__main__":
    main()
