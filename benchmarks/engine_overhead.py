"""Where a search's time goes, without a GPU: the engine's own speed and a projection onto one H200.

Runs the full `prompttune.optimize` path (search and held-out verdict) per optimizer on agnews's real
data and its default space at `--budget` (default 40,000), with a model-free backend: the synthetic
oracle (`prompttune.backends.oracle`, a test device that answers labels with known per-prompt
accuracies and writes scripted instructions), wrapped so every backend call is logged.

(a) Instant backend: engine calls/s, the search ledger's calls over the CPU seconds this process spent
    outside the backend (CPU, not wall: the cores may be shared), and with the oracle's own seconds;
    then the top of a cProfile profile of a second, profiled run.
(b) A latency model of the H200 runs of issue 42 (transformers backend, `--dtype auto` = bf16 there),
    on a virtual clock: each backend call adds `per_call + per_row x rows scored + per_token x tokens
    generated` modelled seconds (nothing sleeps, so the figure is exact and the run takes seconds), plus
    the engine's own CPU seconds on this machine. `per_row` is the issue's bf16 0-demo scoring rate with
    prefix reuse (1,067 prompts/s at batch 128; the default agnews space has no demos); `per_token` its
    bf16 greedy generation rate (14-29 prompts/s at batch 128 for 16 tokens: the midpoint, 21.5);
    `per_call` is fitted (`--fit`, on reflect's run) so that af01368's engine reaches 23,504 calls after
    294 s, the 40k job measured on the H200 (80 calls/s): at af01368 the model reproduces that figure by
    construction (docs/results/engine_overhead.md says what checks it out of sample). A generation is
    charged its `max_new_tokens` (an upper bound: the oracle's texts are short). Printed: the constants,
    the modelled calls/s up to 23,504 calls, the projected wall time of the whole 40k job (search and
    verdict, model load excluded), its mean rows per backend call and its split into scoring /
    generation / engine seconds.

Model-free and deterministic but for the engine's seconds, which depend on the CPU.

PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/engine_overhead.py [--optimizers reflect,sh]
    [--budget 40000] [--fit] [--profile 15]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import pstats
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import prompttune  # noqa: E402
from prompttune.backends.base import Request, WrappedBackend  # noqa: E402
from prompttune.backends.oracle import SyntheticOracleBackend  # noqa: E402
from prompttune.core.config import RunConfig  # noqa: E402
from prompttune.core.types import GenerateRequest, GenerateResult, ScoreRequest, ScoreResult  # noqa: E402
from prompttune.engine.setup import load_run_task  # noqa: E402
from prompttune.results.run import RunResult  # noqa: E402

# The H200 figures of issue 42 (commit af01368, bf16 as `--dtype auto` picks on CUDA).
H200_SCORE_RATE = 1067.0  # 0-demo label scoring with prefix reuse, prompts/s at batch 128
H200_GENERATE_RATE = (14.0 + 29.0) / 2  # 16-token greedy generation, prompts/s at batch 128
H200_40K_CALLS, H200_40K_SECONDS = 23_504, 294.0  # the 40k main job when it was stopped
# Fitted with --fit on af01368's engine (this file's first commit): the fixed seconds of one backend call.
FITTED_PER_CALL = 0.383


@dataclass(frozen=True)
class LatencyModel:
    """Seconds one backend call takes on the modelled device."""

    per_call: float
    per_row: float = 1.0 / H200_SCORE_RATE
    per_token: float = 1.0 / (16 * H200_GENERATE_RATE)

    def seconds(self, rows: int, tokens: int) -> float:
        return self.per_call + self.per_row * rows + self.per_token * tokens


@dataclass
class Call:
    """One backend call: what it held, and when (rows computed so far, engine seconds so far)."""

    kind: str
    rows: int
    tokens: int
    rows_before: int
    engine_before: float


@dataclass
class CallLog(WrappedBackend):
    """The oracle, with each backend call logged and the real seconds spent inside it counted apart."""

    inner: SyntheticOracleBackend
    calls: list[Call] = field(default_factory=list)
    inside: float = 0.0
    rows: int = 0
    engine: float = 0.0  # CPU seconds outside the backend over the whole run, set when it ends
    started: float = field(default_factory=time.process_time)

    def __post_init__(self) -> None:
        self.model_id = self.inner.model_id

    def _log(self, kind: str, requests: Sequence[Request], tokens: int) -> None:
        engine = time.process_time() - self.started - self.inside
        self.calls.append(Call(kind, len(requests), tokens, self.rows, engine))
        self.rows += len(requests)

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        self._log("score", requests, 0)
        start = time.process_time()
        try:
            return self.inner.score(requests)
        finally:
            self.inside += time.process_time() - start

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        self._log("generate", requests, sum(r.max_new_tokens for r in requests))
        start = time.process_time()
        try:
            return self.inner.generate(requests)
        finally:
            self.inside += time.process_time() - start

    def stop(self) -> None:
        self.engine = time.process_time() - self.started - self.inside


def _unit(text: str) -> float:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2**64


def agnews_oracle(config: RunConfig) -> SyntheticOracleBackend:
    """The oracle over agnews's examples: a prompt's accuracy is fixed by its text around the example
    (0.35-0.80), so prompts differ as real ones do and written instructions can win."""
    task = load_run_task(config)
    examples = [e for split in task.splits.values() for e in split]
    oracle: SyntheticOracleBackend

    def accuracy(text: str) -> float:
        example = oracle._query(text)
        skeleton = text if example is None else text.replace(next(iter(example.fields.values())), "")
        return 0.35 + 0.45 * _unit(skeleton)

    def proposals(text: str) -> str:
        return f"Classify the news article by its main topic, reading {int(_unit(text) * 1e6)} as a cue ({{labels}})."

    oracle = SyntheticOracleBackend(examples, accuracy, proposals=proposals)
    return oracle


def run(optimizer: str, budget: int, profile: cProfile.Profile | None = None) -> tuple[CallLog, float, RunResult]:
    """One optimize run on the logged oracle: the log, the wall seconds, the run."""
    config = RunConfig(task="agnews", optimizer=optimizer, budget=budget)
    backend = CallLog(agnews_oracle(config))
    backend.started = time.process_time()
    wall = time.perf_counter()
    if profile:
        profile.enable()
    result = prompttune.optimize("agnews", optimizer=optimizer, budget=budget, backend=backend, record=False)
    backend.stop()
    if profile:
        profile.disable()
    return backend, time.perf_counter() - wall, result


def modelled(log: CallLog, model: LatencyModel, until_rows: int | None = None) -> dict[str, float]:
    """Scoring, generation and engine seconds of the calls made before `until_rows` rows were computed
    (all calls: the whole run), and the calls and rows counted."""
    calls = [c for c in log.calls if until_rows is None or c.rows_before < until_rows]
    scoring = sum(model.seconds(c.rows, 0) for c in calls if c.kind == "score")
    generation = sum(model.seconds(c.rows, c.tokens) - model.per_row * c.rows for c in calls if c.kind == "generate")
    engine = calls[-1].engine_before if until_rows is not None else log.engine
    return {"scoring": scoring, "generation": generation, "engine": engine, "calls": len(calls),
            "rows": sum(c.rows for c in calls), "generate_calls": sum(c.kind == "generate" for c in calls)}


def fit_per_call(log: CallLog) -> float:
    """The fixed seconds per backend call that put 23,504 calls at 294 s on this engine."""
    base = modelled(log, LatencyModel(0.0), H200_40K_CALLS)
    return (H200_40K_SECONDS - base["scoring"] - base["generation"] - base["engine"]) / base["calls"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--optimizers", default="reflect,sh")
    parser.add_argument("--budget", type=int, default=40000)
    parser.add_argument("--fit", action="store_true", help="fit the per-call seconds on reflect's run (af01368)")
    parser.add_argument("--profile", type=int, default=15, help="profile lines to print per optimizer (0: none)")
    args = parser.parse_args()
    per_call = FITTED_PER_CALL
    for optimizer in args.optimizers.split(","):
        log, wall, result = run(optimizer, args.budget)
        calls = result.search_ledger.calls
        engine = log.engine
        print(f"== {optimizer}, budget {args.budget}, agnews default space: {calls} search calls, "
              f"{log.rows} rows computed in {len(log.calls)} backend calls")
        print(result.outcome.notes[0])
        print(f"(a) instant backend: {calls / engine:,.0f} engine calls/s ({engine:.2f} CPU s outside the backend); "
              f"{calls / (engine + log.inside):,.0f} calls/s with the oracle's own {log.inside:.2f} CPU s; wall "
              f"{wall:.1f} s (shared cores)")
        if args.profile:  # a second run, so the profiler's own cost stays out of the figures above
            profile = cProfile.Profile()
            run(optimizer, args.budget, profile)
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.profile)
            print("\n".join(line for line in out.getvalue().splitlines()[4:] if line.strip()))
        if args.fit and optimizer == "reflect":
            per_call = fit_per_call(log)
            print(f"fitted per-call seconds: {per_call:.4f}")
        model = LatencyModel(per_call)
        print(f"(b) latency model: {model.per_call * 1e3:.1f} ms per backend call + {model.per_row * 1e3:.3f} ms per "
              f"scored row + {model.per_token * 1e3:.3f} ms per generated token")
        if optimizer == "reflect":
            head = modelled(log, model, H200_40K_CALLS)
            seconds = head["scoring"] + head["generation"] + head["engine"]
            print(f"    up to {H200_40K_CALLS:,} calls: {seconds:.0f} s modelled, {head['rows'] / seconds:.0f} calls/s "
                  f"(H200 at af01368: {H200_40K_SECONDS:.0f} s, {H200_40K_CALLS / H200_40K_SECONDS:.0f} calls/s)")
        whole = modelled(log, model)
        total = whole["scoring"] + whole["generation"] + whole["engine"]
        print(f"    projected on one H200: {total:.0f} s for the whole job (search and verdict, model load "
              f"excluded); {whole['rows'] / whole['calls']:.1f} rows per backend call ({whole['calls']} calls, "
              f"{whole['generate_calls']} of them generating); scoring {whole['scoring']:.0f} s, generation "
              f"{whole['generation']:.0f} s, engine {whole['engine']:.0f} s")


if __name__ == "__main__":
    main()
