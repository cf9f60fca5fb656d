"""Throughput of the transformers backend before and after shared-prefix reuse, in one run.

On the same agnews examples: label scoring of zero-shot, 4-demo and 8-demo prompts (one candidate,
so every example shares its prefix, as when a search scores a candidate), and greedy generation
of `--gen-tokens` tokens on the zero-shot prompts; each with `prefix_reuse=False` (the
full-prompt path) and `prefix_reuse=True`, and the largest log-prob difference between the two.

Columns: prompts/s; prompt tok/s = prompt tokens the results cover per second (the same
prompts either way); run tok/s = tokens actually run through the model per second (the backend's
`tokens_processed`, no padding); GFLOP/s = 2 x non-embedding parameters x run tok/s (the
matmul work of the layers; attention scores and the lm_head on kept positions are left out);
% peak = GFLOP/s over the torch.matmul rate on large square matrices of the same dtype,
measured in the same run with the same threads.

`--llama-server` starts llama.cpp's OpenAI-compatible server on the embedded GGUF (same threads)
after the transformers rows and adds two more tables on the same examples: the same workloads
through prompttune's openai backend, and DSPy's ordinary path, `dspy.Evaluate` of a `dspy.Predict`
classifier with the same instruction and demos and a `dspy.LM` pointed at that server (DSPy renders
and parses its own chat prompt; `--dspy-threads` is Evaluate's num_threads). `--base-url URL` uses
a server you started instead.

Run: PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/throughput.py [--n 32] [--dtypes fp32,bf16]
     [--threads 1,2] [--batch-sizes 8,16,32,64] [--only "4-demo"] [--device cuda] [--model DIR]
     [--llama-server | --base-url URL]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import torch

from prompttune.backends.backend import Backend
from prompttune.backends.factory import build_backend
from prompttune.backends.transformers_backend import TransformersBackend
from prompttune.backends.transformers_setup import EMBEDDED_MODEL, resolve_dtype
from prompttune.core.config import BackendConfig
from prompttune.core.types import GenerateRequest, ScoreRequest
from prompttune.scoring.evaluator import shared_prefix
from prompttune.search_spaces import default_space, render
from prompttune.tasks import SplitSizes, load_task
from prompttune.tasks.task import Task

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# `--clock cpu` times this process's CPU seconds instead of wall seconds: on a machine shared with
# other jobs that still compares the two paths fairly (with N threads it counts N x the work time).
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


def matmul_peak(dtype: torch.dtype, device: str, clock: Callable[[], float], size: int = 2048,
                reps: int = 5) -> float:
    """GFLOP/s of torch.matmul on `size`-square matrices: the ceiling the model's matmuls aim at."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    torch.matmul(a, b)  # warm-up
    start = clock()
    for _ in range(reps):
        torch.matmul(a, b)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return 2 * size ** 3 * reps / (clock() - start) / 1e9


def layer_params(backend: TransformersBackend) -> int:
    """Parameters every token multiplies through (the embedding table is a lookup, not a matmul)."""
    embedding = backend.model.get_input_embeddings().weight.numel()
    return sum(p.numel() for p in backend.model.parameters()) - embedding


def timed(backend: TransformersBackend, call: Callable[[list], list], requests: list, reuse: bool,
          clock: Callable[[], float]) -> tuple[list, float, int]:
    """Results, seconds and tokens run for one call on the chosen path."""
    backend.prefix_reuse = reuse
    before = backend.tokens_processed
    start = clock()
    results = call(requests)
    return results, clock() - start, backend.tokens_processed - before


def workloads(task: Task, backend: TransformersBackend, gen_tokens: int) -> dict[str, tuple[str, list]]:
    """name → (mode, requests) built as the evaluator builds them, prefix hints included."""
    spec = default_space(task).default_candidate().spec
    train, test = task.splits["train"], task.splits["test"]
    out: dict[str, tuple[str, list]] = {}
    for demos in (0, 4, 8):
        shots = train[:demos]
        shot_spec = spec.with_updates(demo_ids=tuple(d.id for d in shots))
        prefix = shared_prefix(backend, shot_spec, shots)
        prompts = [render(shot_spec, ex, shots) for ex in test]
        out[f"score {demos}-demo"] = ("score", [ScoreRequest(backend.to_text(p), p.label_continuations,
                                                             prefix) for p in prompts])
    zero = out["score 0-demo"][1]
    out[f"generate {gen_tokens} tok"] = ("generate", [GenerateRequest(r.text, gen_tokens, r.prefix)
                                                       for r in zero])
    return out


def warmed_workloads(task: Task, reference: TransformersBackend, caller: Backend,
                     args: argparse.Namespace) -> Iterator[tuple[str, str, Callable[[list], list], list]]:
    """(name, mode, caller's method, requests) for each selected workload, after a warm-up call."""
    for name, (mode, requests) in workloads(task, reference, args.gen_tokens).items():
        if args.only not in name:
            continue
        call = caller.score if mode == "score" else caller.generate
        requests = requests if mode == "score" else requests[:args.gen_n]
        call(requests[:2])
        yield name, mode, call, requests


def table(backend: TransformersBackend, task: Task, args: argparse.Namespace, peak: float) -> None:
    """One row per workload and path at the backend's current thread and batch settings."""
    flop_per_token = 2 * layer_params(backend)
    print(f"\n{args.device} {backend.model.dtype}, {torch.get_num_threads()} threads, {args.clock} clock, "
          f"batches of {backend.batch_size} rows / {backend.max_batch_tokens} tokens; "
          f"matmul peak {peak:.0f} GFLOP/s")
    print(f"{'workload':<18}{'path':<8}{'prompts/s':>10}{'prompt tok/s':>14}{'run tok/s':>11}"
          f"{'GFLOP/s':>9}{'% peak':>8}{'speed-up':>10}{'max |diff|':>12}")
    for name, mode, call, requests in warmed_workloads(task, backend, backend, args):
        full, full_s, full_run = timed(backend, call, requests, False, CLOCKS[args.clock])
        reused, reused_s, reused_run = timed(backend, call, requests, True, CLOCKS[args.clock])
        if mode == "score":
            diff = max(abs(a - b) for r, f in zip(reused, full) for a, b in zip(r.logprobs, f.logprobs))
            agree = f"{diff:.1e}"
        else:
            agree = "same text" if [r.text for r in reused] == [f.text for f in full] else "TEXT DIFFERS"
        covered = sum(r.prompt_tokens for r in full)
        for path, seconds, run in (("full", full_s, full_run), ("reuse", reused_s, reused_run)):
            gflops = flop_per_token * run / seconds / 1e9
            speedup = f"{full_s / seconds:.2f}x" if path == "reuse" else ""
            print(f"{name:<18}{path:<8}{len(requests) / seconds:>10.2f}{covered / seconds:>14.0f}"
                  f"{run / seconds:>11.0f}{gflops:>9.1f}{100 * gflops / peak:>7.1f}%{speedup:>10}"
                  f"{agree if path == 'reuse' else '':>12}", flush=True)


def server_table(url: str, reference: TransformersBackend, task: Task, args: argparse.Namespace) -> None:
    """The same requests through an OpenAI-compatible server (llama.cpp's caches prefixes itself)."""
    backend = build_backend(BackendConfig(backend="openai", base_url=[url], model=args.model))
    print(f"\nserver {url} ({backend.model})")
    print(f"{'workload':<18}{'path':<8}{'prompts/s':>10}{'prompt tok/s':>14}")
    for name, _, call, requests in warmed_workloads(task, reference, backend, args):
        start = time.perf_counter()  # the server's time is not this process's CPU time
        results = call(requests)
        seconds = time.perf_counter() - start
        covered = sum(r.prompt_tokens for r in results)
        print(f"{name:<18}{'server':<8}{len(requests) / seconds:>10.2f}{covered / seconds:>14.0f}",
              flush=True)
    backend.close()


def dspy_table(url: str, reference: TransformersBackend, task: Task, args: argparse.Namespace) -> None:
    """DSPy's ordinary evaluation path on the same examples: Evaluate → Predict → LM → the server."""
    import dspy
    import httpx

    from prompttune.dspy_bridge.program import ProgramMapping

    served = httpx.get(f"{url}/models", timeout=10).json()["data"][0]["id"]
    lm = dspy.LM(f"openai/{served}", api_base=url, api_key="none", cache=False, temperature=0.0,
                 max_tokens=64)
    dspy.configure(lm=lm)
    spec = default_space(task).default_candidate().spec
    train, test = task.splits["train"], task.splits["test"]
    mapping = ProgramMapping.build(spec, task.input_fields, train, test)
    devset = [mapping.example(ex) for ex in test]
    print(f"\nDSPy {dspy.__version__} Evaluate via dspy.LM → {url} ({served}), "
          f"{args.dspy_threads} threads, ChatAdapter")
    print(f"{'workload':<18}{'path':<8}{'prompts/s':>10}{'accuracy':>10}")
    for demos in (int(d) for d in args.dspy_demos.split(",")):
        name = f"score {demos}-demo"
        if args.only not in name:
            continue
        shots = train[:demos]
        program = mapping.program(spec.with_updates(demo_ids=tuple(d.id for d in shots)), shots)
        evaluate = dspy.Evaluate(devset=devset, metric=lambda gold, pred, trace=None: gold.label == pred.label,
                                 num_threads=args.dspy_threads, display_progress=False, max_errors=len(devset))
        evaluate(program, devset=devset[:2])  # warm-up, as for the other rows
        start = time.perf_counter()
        result = evaluate(program)
        seconds = time.perf_counter() - start
        print(f"{name:<18}{'dspy':<8}{len(devset) / seconds:>10.2f}{result.score / 100:>10.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=32, help="test examples per workload")
    parser.add_argument("--gen-n", type=int, default=16, help="of those, how many to generate for")
    parser.add_argument("--gen-tokens", type=int, default=16)
    parser.add_argument("--batch-sizes", default="32", help="most rows per batch; a list sweeps them")
    parser.add_argument("--max-batch-tokens", default="", help="a list sweeps them (default: the backend's)")
    parser.add_argument("--threads", default="", help="a list sweeps them (default: physical cores)")
    parser.add_argument("--only", default="", help="run only workloads whose name contains this")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--model", default=EMBEDDED_MODEL, help="HF id, local directory or .gguf file")
    parser.add_argument("--base-url", help="also time this OpenAI-compatible server on the same requests")
    parser.add_argument("--llama-server", action="store_true",
                        help="start llama.cpp's server on the embedded GGUF and time it and DSPy Evaluate")
    parser.add_argument("--dspy-threads", type=int, default=4, help="dspy.Evaluate num_threads")
    parser.add_argument("--dspy-demos", default="0",
                        help="demo counts for the DSPy rows (about 10 s an example here, so zero-shot only by default)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="cpu: rates per CPU second of this process (fair on a shared machine)")
    args = parser.parse_args()
    task = load_task("agnews", None, SplitSizes(10, 10, args.n))
    threads = [int(t) for t in args.threads.split(",")] if args.threads else [None]
    for dtype in args.dtypes.split(","):
        backend = TransformersBackend(args.model, dtype=dtype, device=args.device, threads=threads[0])
        for n_threads in threads:
            if n_threads:
                torch.set_num_threads(n_threads)
            peak = matmul_peak(resolve_dtype(dtype, args.device), args.device, CLOCKS[args.clock])
            for batch_size in args.batch_sizes.split(","):
                for max_tokens in args.max_batch_tokens.split(",") if args.max_batch_tokens else [None]:
                    backend.batch_size = int(batch_size)
                    backend.max_batch_tokens = int(max_tokens) if max_tokens else backend.max_batch_tokens
                    table(backend, task, args, peak)
    with contextlib.ExitStack() as stack:
        url = args.base_url
        if args.llama_server:
            from prompttune.backends.transformers_setup import embedded_model_path
            from prompttune.testing.llama_server import running_llama_server

            url = stack.enter_context(running_llama_server(embedded_model_path(), threads=torch.get_num_threads()))
        if url:
            server_table(url, backend, task, args)
            dspy_table(url, backend, task, args)


if __name__ == "__main__":
    main()
