"""Several reflections decoded alone or in one batch: what reflect's `decode_together` buys on this device.

A reflection step with `parents=K` asks for K critiques in one generate call. The transformers backend
decodes each alone (its own request group: a text that does not depend on the others), so the call
costs about the sum of K decodes; with `decode_together` they share one batch, which decodes until its
longest text ends. This times both on the embedded model with reflect's critique budget (the proposer's
64 new tokens), on K critique requests of the length reflect writes (an instruction, three quoted agnews
errors with their margins), and prints seconds, generated tokens and how many texts changed in the batch.
Run it alone: another model process on the same cores slows every figure.

Run: PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/decode_together.py [--parents 4] [--repeats 3]
     [--device cuda] [--dtype auto] [--model PATH]
"""

from __future__ import annotations

import argparse
import statistics
import time

from prompttune.backends.transformers_backend import EMBEDDED_MODEL, TransformersBackend
from prompttune.core.types import GenerateRequest, Prompt
from prompttune.tasks import SplitSizes, load_task

CRITIQUE = ("The instruction below made these errors on news headlines (the model preferred the wrong topic by the "
            "margin shown):\n{errors}\nInstruction: Classify the topic of the news article as one of: World, "
            "Sports, Business, Sci/Tech.\nIn one sentence, what should the instruction say so that these are "
            "answered right?")


def critiques(parents: int) -> list[str]:
    """`parents` critique requests, each quoting three agnews test texts as errors."""
    texts = [" ".join(e.fields.values()) for e in load_task("agnews", None, SplitSizes(10, 10, 3 * parents)).splits["test"]]
    return [CRITIQUE.format(errors="\n".join(f"- {t} (the model preferred 'World' by {0.4 + k / 10:.1f} nats)"
                                             for k, t in enumerate(texts[3 * p: 3 * p + 3])))
            for p in range(parents)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parents", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--model", default=EMBEDDED_MODEL, help="a GGUF file or model directory")
    args = parser.parse_args()
    backend = TransformersBackend(args.model, device=args.device, dtype=args.dtype)
    prompts = [backend.to_text(Prompt(messages=(("user", text),))) for text in critiques(args.parents)]
    ways = {"alone": lambda: [GenerateRequest(p, args.max_new_tokens, group=g) for g, p in enumerate(prompts)],
            "together": lambda: [GenerateRequest(p, args.max_new_tokens, group=0) for p in prompts]}
    backend.generate(ways["alone"]()[:1])  # warm-up
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    texts: dict[str, list[str]] = {}
    tokens: dict[str, int] = {}
    for _ in range(args.repeats):
        for way, requests in ways.items():
            start = time.perf_counter()
            results = backend.generate(requests())
            seconds[way].append(time.perf_counter() - start)
            texts[way], tokens[way] = [r.text for r in results], sum(r.completion_tokens for r in results)
    print(f"{args.parents} critiques, {args.max_new_tokens} new tokens at most, {backend.model_id} on {args.device}, "
          f"median of {args.repeats}")
    for way in ways:
        print(f"  {way:<8} {statistics.median(seconds[way]):6.2f} s  ({tokens[way]} tokens generated)")
    changed = sum(a != b for a, b in zip(texts["alone"], texts["together"]))
    print(f"  together / alone: {statistics.median(seconds['together']) / statistics.median(seconds['alone']):.2f}; "
          f"texts that differ: {changed} of {args.parents}")


if __name__ == "__main__":
    main()
