"""Why bf16 label scoring ran ~3x slower than fp32 on the H200 (issue 42 item 4), and which path
`--dtype auto` should take there: the fastest within 1e-2 nats of fp32's full-prompt log-probs.

It prints, in order, so that a run stopped at its time limit still answers the first questions:
1. per dtype, what the loaded model really holds: parameter and buffer dtypes, the Linear modules'
   classes (plain nn.Linear = dequantized weights; anything else = packed GGUF blocks cast per
   matmul), the attention implementation, and what `resolve_dtype("auto", device)` picks;
2. per path (fp32, fp32 with TF32 matmuls, bf16; full prompt and prefix reuse): prompts/s on the
   0-demo and 4-demo agnews workloads of throughput.py, and the largest label log-prob difference
   from fp32's full path; then the fastest path within the tolerance;
3. where one scoring call's time goes in fp32 and bf16 (torch.profiler, top operators);
4. the full path at each attention kernel SDPA offers (efficient, cuDNN, flash, math) and eager:
   whether one kernel choice alone explains the bf16 gap.

Run: PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/dtype_probe.py --device cuda [--n 512]
     [--batch-size 128] [--model embedded:smollm2-135m-instruct]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.throughput import workloads  # noqa: E402
from prompttune.backends.transformers_backend import TransformersBackend  # noqa: E402
from prompttune.backends.transformers_setup import EMBEDDED_MODEL, resolve_dtype  # noqa: E402
from prompttune.core.types import ScoreRequest  # noqa: E402
from prompttune.tasks import SplitSizes, load_task  # noqa: E402

TOLERANCE = 1e-2  # nats: issue 42's bound on a path's distance from fp32's full-prompt log-probs
WORKLOADS = ("score 0-demo", "score 4-demo")


def describe(backend: TransformersBackend) -> None:
    """What the load produced, rather than what was asked for."""
    model = backend.model
    linear = Counter(type(m).__name__ for m in model.modules() if "Linear" in type(m).__name__)
    quantizer = getattr(model, "hf_quantizer", None)
    config = getattr(quantizer, "quantization_config", None)
    print(f"  model_id {backend.model_id}; model.dtype {model.dtype}; attention {model.config._attn_implementation}")
    print(f"  parameters {dict(Counter(str(p.dtype) for p in model.parameters()))}; "
          f"buffers {dict(Counter(str(b.dtype) for b in model.buffers()))}")
    print(f"  linear modules {dict(linear)}; quantizer {type(quantizer).__name__ if quantizer else None}"
          f" (architecture on the packed path: {getattr(quantizer, 'supported', None)}, "
          f"dequantize={getattr(config, 'dequantize', None)})", flush=True)


@contextlib.contextmanager
def tf32(enabled: bool) -> Iterator[None]:
    """fp32 matmuls on tensor cores (TF32: 10-bit mantissa products, fp32 accumulation)."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def timed_scores(backend: TransformersBackend, requests: list[ScoreRequest]) -> tuple[list[tuple[float, ...]], float]:
    """Log-probs and prompts/s of one scoring call after a warm-up (the .item() reads synchronize)."""
    backend.score(requests[:8])
    start = time.perf_counter()
    results = backend.score(requests)
    return [r.logprobs for r in results], len(requests) / (time.perf_counter() - start)


def max_diff(a: list[tuple[float, ...]], b: list[tuple[float, ...]]) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


def flips(a: list[tuple[float, ...]], b: list[tuple[float, ...]]) -> int:
    """Examples whose top label differs: what a changed log-prob does to accuracy."""
    return sum(max(range(len(ra)), key=ra.__getitem__) != max(range(len(rb)), key=rb.__getitem__)
               for ra, rb in zip(a, b))


def profile(backend: TransformersBackend, requests: list[ScoreRequest], device: str) -> None:
    """Top operators of one full-path scoring call, and how many kernels it launched."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    backend.prefix_reuse = False
    backend.score(requests[:8])
    with torch.profiler.profile(activities=activities) as prof:
        backend.score(requests)
    events = prof.key_averages()
    key = "self_cpu_time_total"
    if device.startswith("cuda"):  # renamed from self_cuda_time_total in torch 2.4
        key = "self_device_time_total" if hasattr(events[0], "self_device_time_total") else "self_cuda_time_total"
    kernels = sum(e.count for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA)
    print(f"  kernels launched: {kernels}; top operators by {key}:")
    print(events.table(sort_by=key, row_limit=14, max_name_column_width=48), flush=True)


def attention_variants(backend: TransformersBackend, requests: list[ScoreRequest],
                       reference: list[tuple[float, ...]]) -> None:
    """Full-path prompts/s with SDPA held to one kernel, then with eager attention."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend.prefix_reuse = False
    for kernel in ("EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "FLASH_ATTENTION", "MATH"):
        if not hasattr(SDPBackend, kernel):
            continue
        try:
            with sdpa_kernel([getattr(SDPBackend, kernel)]):
                logprobs, rate = timed_scores(backend, requests)
            print(f"  sdpa {kernel:<20}{rate:>10.1f} prompts/s  max |diff| vs fp32 full {max_diff(logprobs, reference):.1e}",
                  flush=True)
        except RuntimeError as exc:
            print(f"  sdpa {kernel:<20} unavailable: {str(exc).splitlines()[0][:100]}", flush=True)
    model = backend.model
    try:
        model.set_attn_implementation("eager")
        logprobs, rate = timed_scores(backend, requests)
        print(f"  eager attention         {rate:>10.1f} prompts/s  max |diff| vs fp32 full "
              f"{max_diff(logprobs, reference):.1e}", flush=True)
    except (AttributeError, ValueError, RuntimeError) as exc:
        print(f"  eager attention unavailable: {str(exc).splitlines()[0][:100]}", flush=True)
    finally:
        with contextlib.suppress(AttributeError, ValueError):
            model.set_attn_implementation("sdpa")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default=EMBEDDED_MODEL)
    parser.add_argument("--n", type=int, default=512, help="test examples per workload")
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    print(f"torch {torch.__version__}; auto picks {resolve_dtype('auto', args.device)} on {args.device}", flush=True)
    task = load_task("agnews", None, SplitSizes(10, 10, args.n))
    backends: dict[str, TransformersBackend] = {}
    for dtype in ("fp32", "bf16"):
        print(f"{dtype}: as loaded", flush=True)
        backends[dtype] = TransformersBackend(args.model, dtype=dtype, device=args.device, batch_size=args.batch_size)
        backends[dtype].prefix_memo_bytes = 0  # every call computes its prefixes: no path gets another's
        describe(backends[dtype])
    requests = {name: reqs for name, (_, reqs) in workloads(task, backends["fp32"], 1).items() if name in WORKLOADS}
    paths: list[tuple[str, str, bool, bool]] = [(f"{dtype}{'+tf32' if tf else ''} {'reuse' if reuse else 'full'}",
                                                 dtype, tf, reuse)
                                                for dtype, tf in (("fp32", False), ("fp32", True), ("bf16", False))
                                                for reuse in (False, True)]
    reference: dict[str, list[tuple[float, ...]]] = {}
    rates: dict[str, float] = {}
    worst: dict[str, float] = {}
    print(f"\npath               {'':<2}" + "".join(f"{w + ' p/s':>18}{'max |diff|':>12}{'flips':>7}" for w in WORKLOADS))
    for label, dtype, tf, reuse in paths:
        backend = backends[dtype]
        backend.prefix_reuse = reuse
        cells, seconds, diffs = [], 0.0, []
        with tf32(tf):
            for name in WORKLOADS:
                logprobs, rate = timed_scores(backend, requests[name])
                reference.setdefault(name, logprobs)  # the first path is fp32 full
                diffs.append(max_diff(logprobs, reference[name]))
                seconds += len(requests[name]) / rate
                cells.append(f"{rate:>18.1f}{diffs[-1]:>12.1e}{flips(logprobs, reference[name]):>7}")
        rates[label], worst[label] = sum(len(r) for r in requests.values()) / seconds, max(diffs)
        print(f"{label:<20}" + "".join(cells), flush=True)
    within = [label for label in rates if worst[label] <= TOLERANCE]
    best = max(within, key=rates.__getitem__)
    print(f"\nfastest within {TOLERANCE:g} nats of fp32 full (0-demo and 4-demo together): {best} "
          f"({rates[best]:.1f} prompts/s); fastest overall: {max(rates, key=rates.__getitem__)}", flush=True)
    for dtype in ("fp32", "bf16"):
        print(f"\nprofile, {dtype} full path, 0-demo:")
        try:
            profile(backends[dtype], requests["score 0-demo"], args.device)
        except (RuntimeError, AttributeError, KeyError, IndexError) as exc:  # the profiler's API moves between versions
            print(f"  profile failed: {exc}", flush=True)
    for dtype in ("bf16", "fp32"):
        print(f"\nattention kernels, {dtype} full path, 0-demo:")
        attention_variants(backends[dtype], requests["score 0-demo"], reference["score 0-demo"])


if __name__ == "__main__":
    main()
