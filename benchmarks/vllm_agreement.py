"""Score N agnews test prompts with one backend, time it, and compare with a saved reference.

The reference is the transformers backend (`--save`); vLLM's offline engine and servers are
compared against it (`--against`): same argmax label on >= `--min-agreement` of the prompts,
plus a summary of the per-label log-prob differences and of greedy generations; and `serve: choice`'s
constrained decoding (`Backend.choose`: vLLM's structured-outputs choice, the server's own, the reference's
vocabulary walk) on AG News's labels (` Sci/Tech` is several tokens), with first-token offsets, and on labels
sharing a first token: the same answer on >= `--min-agreement` of the prompts in each case.

Run: PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/vllm_agreement.py --backend transformers \
       --dtype fp32 --save ref.json
     python benchmarks/vllm_agreement.py --backend vllm --model DIR --dtype fp32 --against ref.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from prompttune.backends.backend import Backend
from prompttune.backends.factory import add_backend_arguments, backend_options, build_backend
from prompttune.core.config import BackendConfig
from prompttune.core.types import ChoiceRequest, GenerateRequest, ScoreRequest
from prompttune.search_spaces import default_space, render
from prompttune.tasks import SplitSizes, load_task

AGNEWS = (" World", " Sports", " Business", " Sci/Tech")
CHOICE_CASES = {"agnews labels": (AGNEWS, ()), "agnews labels, offsets": (AGNEWS, (1.5, -0.5, 0.8, 2.5)),
                "one first token": ((" Sci", " Sci/Tech", " Sci/Fi"), ())}


def _report(label: str, count: int, unit: str, started: float) -> None:
    seconds = time.perf_counter() - started
    print(f"  {label}: {count} {unit} in {seconds:.1f}s = {count / seconds:.1f} {unit}/s")


def measure(backend: Backend, n: int, n_generate: int, max_new_tokens: int) -> dict:
    task = load_task("agnews", None, SplitSizes(10, 10, n))
    spec = default_space(task).default_candidate().spec
    prompts = [render(spec, ex, []) for ex in task.splits["test"]]
    scoring = [ScoreRequest(backend.to_text(p), p.label_continuations) for p in prompts]
    backend.score(scoring[:4])  # warm-up
    started = time.perf_counter()
    scores = backend.score(scoring)
    _report("label scoring", len(scoring), "prompts", started)
    started = time.perf_counter()
    outs = backend.generate([GenerateRequest(r.text, max_new_tokens) for r in scoring[:n_generate]])
    _report("generation", sum(o.completion_tokens for o in outs), "tokens", started)
    choices = {}
    for name, (labels, bias) in CHOICE_CASES.items():
        started = time.perf_counter()
        choices[name] = [c.choice for c in backend.choose([ChoiceRequest(r.text, labels, bias) for r in scoring])]
        _report(f"constrained decoding ({name})", len(scoring), "prompts", started)
    return {"model_id": backend.model_id, "logprobs": [list(s.logprobs) for s in scores],
            "labels": [ex.label for ex in task.splits["test"]], "generations": [o.text for o in outs],
            "choices": choices}


def compare(got: dict, ref: dict, min_agreement: float) -> bool:
    def argmax(row: list[float]) -> int:
        return max(range(len(row)), key=row.__getitem__)

    pairs = list(zip(got["logprobs"], ref["logprobs"]))
    agree = sum(argmax(g) == argmax(r) for g, r in pairs) / len(pairs)
    diffs = sorted(abs(a - b) for g, r in pairs for a, b in zip(g, r))
    accuracy = {name: sum(argmax(row) == y for row, y in zip(run["logprobs"], run["labels"])) / len(pairs)
                for name, run in (("this", got), ("reference", ref))}
    same_text = sum(a == b for a, b in zip(got["generations"], ref["generations"]))
    print(f"  vs {ref['model_id']}: argmax agreement {agree:.1%} on {len(pairs)} prompts "
          f"(accuracy {accuracy['this']:.3f} vs {accuracy['reference']:.3f})")
    print(f"  |log-prob difference| per label: median {statistics.median(diffs):.4f}, "
          f"p95 {diffs[int(0.95 * (len(diffs) - 1))]:.4f}, max {diffs[-1]:.4f}")
    print(f"  greedy generations identical: {same_text}/{len(got['generations'])}")
    chose = {name: sum(a == b for a, b in zip(got["choices"][name], answers)) / len(answers)
             for name, answers in ref["choices"].items()}
    for name, share in chose.items():
        print(f"  constrained decoding, {name}: the same answer on {share:.1%} of {len(pairs)} prompts")
    return agree >= min_agreement and min(chose.values()) >= min_agreement


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_backend_arguments(parser)
    parser.add_argument("--n", type=int, default=200, help="agnews test prompts to score")
    parser.add_argument("--generate", type=int, default=16, help="prompts to generate for")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--save", type=Path, help="write the scores here (the reference run)")
    parser.add_argument("--against", type=Path, help="compare with a saved reference run")
    parser.add_argument("--min-agreement", type=float, default=0.95)
    args = parser.parse_args()
    backend = build_backend(BackendConfig(**backend_options(args)))
    print(f"{backend.model_id}:")
    result = measure(backend, args.n, args.generate, args.max_new_tokens)
    for server, stats in getattr(backend, "stats", {}).items():
        print(f"  {server}: {stats}")
    if args.save:
        args.save.write_text(json.dumps(result))
    if args.against and not compare(result, json.loads(args.against.read_text()), args.min_agreement):
        print(f"  FAIL: agreement below {args.min_agreement:.0%}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
