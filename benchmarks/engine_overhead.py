"""Where a search's time goes, without a GPU: the engine's own speed and a projection onto one H200.

Runs the full `prompttune.optimize` path (search and held-out verdict) per optimizer on agnews's real
data and its default space at `--budget` (default 40,000), with a model-free backend: the synthetic
oracle (`prompttune.testing`, a test device that answers labels with known per-prompt
accuracies and writes scripted instructions), wrapped so every backend call is logged.

(a) Instant backend: engine calls/s, the search ledger's calls over the CPU seconds this process spent
    outside the backend (CPU, not wall: the cores may be shared), and with the oracle's own seconds;
    then the top of a cProfile profile of a second, profiled run.
(b) A latency model of the H200 check at a7de703 (docs/results/gpu_2026-12-04.md: transformers backend, fp32 as
    `--dtype auto` picks on CUDA, the real embedded weights), on a virtual clock: a scoring call adds
    `per_call + per_row x rows` (a constrained-choice call too, under `choice`, the default contract: unmeasured on
    the H200, charged as the one forward pass at the answer position it takes where the labels' first tokens
    are distinct, as agnews's are), a generating call `per_generation` per call ("free" batching: a launch-bound
    decode costs about the same at batch 1 and batch 8) or per row ("linear": no gain from batching) — batched
    generation was not measured on the H200, so both bounds are printed. Each bound is a backend of its own, and
    the search is run on each: "free" is one that decodes a call's texts together (vLLM, a pool of servers),
    "linear" one that decodes them one after another (the transformers backend), and reflect's `parents`
    default follows that (4 and 1). Nothing sleeps, so the figures are
    exact and a 40k job takes seconds; the engine's own CPU seconds on this machine are added. `per_row` is
    the check's fp32 0-demo scoring rate with prefix reuse (1,577.8 prompts/s at batch 128); `per_call` is
    fitted so that the 40k job's 168 scoring calls over 26,258 rows take its measured 40.1 s; `per_generation`
    is its 156.0 s over 171 one-prompt generating calls. The out-of-sample check is `make optimize`'s job
    (budget 2,000; measured 4.8 s scoring, 11.4 s generating in 47 backend calls), run here too. Printed: the
    constants, the check, the projected wall time of the whole 40k job (search and verdict, model load
    excluded) under each bound, its mean rows per backend call and its split into scoring / generation / engine.

Model-free and deterministic but for the engine's seconds, which depend on the CPU.

PROMPTTUNE_DATA_DIR=../shared/data python benchmarks/engine_overhead.py [--optimizers reflect,sh,reflect:parents=4]
    [--budget 40000] [--profile 15]
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
from typing import Any, Callable, Literal, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import prompttune  # noqa: E402
from prompttune.backends.backend import Request, WrappedBackend  # noqa: E402
from prompttune.core.config import RunConfig  # noqa: E402
from prompttune.core.types import (  # noqa: E402
    ChoiceRequest,
    ChoiceResult,
    GenerateRequest,
    GenerateResult,
    ScoreRequest,
    ScoreResult,
)
from prompttune.results.run import RunResult  # noqa: E402
from prompttune.tasks import load_run_task  # noqa: E402
from prompttune.testing import SyntheticOracleBackend  # noqa: E402

# The H200 check at a7de703 (docs/results/gpu_2026-12-04.md), fp32 as `--dtype auto` picks on CUDA.
H200_SCORE_RATE = 1577.8  # 0-demo label scoring with prefix reuse, prompts/s at batch 128
H200_SCORING = (40.1, 168, 26_258)  # the 40k job when cut: scoring seconds, scoring calls, rows scored
H200_GENERATION = (156.0, 171)  # and its generating seconds over its generating calls (one prompt each)
H200_2000 = {"scoring": 4.8, "generation": 11.4, "engine": 0.7, "calls": 47}  # make optimize's job, measured
SCORE_PER_ROW = 1.0 / H200_SCORE_RATE
SCORE_PER_CALL = (H200_SCORING[0] - H200_SCORING[2] * SCORE_PER_ROW) / H200_SCORING[1]
GENERATION_PER_CALL = H200_GENERATION[0] / H200_GENERATION[1]


@dataclass(frozen=True)
class LatencyModel:
    """Seconds one backend call takes on the modelled device; `batched_generation` says how a generating call of
    several prompts is charged (unmeasured on the H200: "free" and "linear" bound it)."""

    batched_generation: Literal["free", "linear"]
    per_call: float = SCORE_PER_CALL
    per_row: float = SCORE_PER_ROW
    per_generation: float = GENERATION_PER_CALL

    def seconds(self, kind: str, rows: int) -> float:
        if kind == "generate":
            return self.per_generation * (1 if self.batched_generation == "free" else rows)
        return self.per_call + self.per_row * rows


@dataclass
class Call:
    """One backend call: what it held."""

    kind: str
    rows: int


@dataclass
class CallLog(WrappedBackend):
    """The oracle, with each backend call logged and the real seconds spent inside it counted apart; `together`
    says whether it stands for a backend that decodes a call's texts together."""

    inner: SyntheticOracleBackend
    together: bool = True
    calls: list[Call] = field(default_factory=list)
    inside: float = 0.0
    rows: int = 0
    engine: float = 0.0  # CPU seconds outside the backend over the whole run, set when it ends
    started: float = field(default_factory=time.process_time)

    def __post_init__(self) -> None:
        self.model_id = self.inner.model_id

    @property
    def decodes_together(self) -> bool:
        return self.together

    def _timed(self, kind: str, requests: Sequence[Request], call: Callable[[Any], list]) -> list:
        """`call(requests)`, logged as one backend call of `kind`, its CPU seconds counted inside the backend."""
        self.calls.append(Call(kind, len(requests)))
        self.rows += len(requests)
        start = time.process_time()
        try:
            return call(requests)
        finally:
            self.inside += time.process_time() - start

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        return self._timed("score", requests, self.inner.score)

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        return self._timed("generate", requests, self.inner.generate)

    def choose(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        return self._timed("choice", requests, self.inner.choose)

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


def run(arm: str, budget: int, together: bool, profile: cProfile.Profile | None = None
        ) -> tuple[CallLog, float, RunResult]:
    """One optimize run on the logged oracle (`arm`: an optimizer, optionally with `:KEY=VALUE` options, e.g.
    `reflect:parents=4`), standing for a backend that decodes a call's texts `together` or not: the log, the
    wall seconds, the run."""
    optimizer, *settings = arm.split(":")
    options = dict(setting.split("=", 1) for setting in settings)
    config = RunConfig(task="agnews", optimizer=optimizer, budget=budget)
    backend = CallLog(agnews_oracle(config), together)
    backend.started = time.process_time()
    wall = time.perf_counter()
    if profile:
        profile.enable()
    result = prompttune.optimize("agnews", optimizer=optimizer, budget=budget, backend=backend, record=False,
                                 options=options)
    backend.stop()
    if profile:
        profile.disable()
    return backend, time.perf_counter() - wall, result


def modelled(log: CallLog, model: LatencyModel) -> dict[str, float]:
    """Scoring, generation and engine seconds of the whole run, and the calls and rows counted."""
    return {"scoring": sum(model.seconds(c.kind, c.rows) for c in log.calls if c.kind != "generate"),
            "generation": sum(model.seconds(c.kind, c.rows) for c in log.calls if c.kind == "generate"),
            "engine": log.engine, "calls": len(log.calls), "rows": sum(c.rows for c in log.calls),
            "generate_calls": sum(c.kind == "generate" for c in log.calls),
            "generated_rows": sum(c.rows for c in log.calls if c.kind == "generate")}


def projection(log: CallLog, model: LatencyModel) -> str:
    whole = modelled(log, model)
    total = whole["scoring"] + whole["generation"] + whole["engine"]
    return (f"{total:.0f} s ({model.batched_generation} batched generation): scoring {whole['scoring']:.0f} s, "
            f"generation {whole['generation']:.0f} s, engine {whole['engine']:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--optimizers", default="reflect,sh")
    parser.add_argument("--budget", type=int, default=40000)
    parser.add_argument("--profile", type=int, default=15, help="profile lines to print per optimizer (0: none)")
    args = parser.parse_args()
    bounds = {True: LatencyModel("free"), False: LatencyModel("linear")}  # by whether texts are decoded together
    print(f"(b) latency model: {SCORE_PER_CALL * 1e3:.1f} ms per scoring call + {SCORE_PER_ROW * 1e3:.3f} ms per "
          f"scored row; {GENERATION_PER_CALL * 1e3:.0f} ms per generating call (free: a backend that decodes a "
          "call's texts together) or per generated prompt (linear: one that decodes them one after another)")
    check, _, _ = run("reflect", 2000, together=False)  # as the H200 check ran it: the transformers backend
    measured = H200_2000
    print(f"    out-of-sample check, reflect at budget 2000 (make optimize's job) as the transformers backend runs "
          f"it: {len(check.calls)} backend calls; " + "; ".join(projection(check, model) for model in bounds.values())
          + f" — measured on the H200: {measured['calls']} calls, scoring {measured['scoring']} s, generation "
          f"{measured['generation']} s, engine {measured['engine']} s")
    for optimizer in args.optimizers.split(","):
        for together, model in bounds.items():
            log, wall, result = run(optimizer, args.budget, together)
            calls = result.search_ledger.calls
            engine = log.engine
            kind = "decodes a call's texts together" if together else "decodes them one after another"
            print(f"== {optimizer}, budget {args.budget}, agnews default space, on a backend that {kind}: {calls} "
                  f"search calls, {log.rows} rows computed in {len(log.calls)} backend calls")
            print(result.outcome.notes[0])
            print(f"(a) instant backend: {calls / engine:,.0f} engine calls/s ({engine:.2f} CPU s outside the "
                  f"backend); {calls / (engine + log.inside):,.0f} calls/s with the oracle's own {log.inside:.2f} "
                  f"CPU s; wall {wall:.1f} s (shared cores)")
            if args.profile and together:  # a second run, so the profiler's own cost stays out of the figures above
                profile = cProfile.Profile()
                run(optimizer, args.budget, together, profile)
                out = io.StringIO()
                pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.profile)
                print("\n".join(line for line in out.getvalue().splitlines()[4:] if line.strip()))
            whole = modelled(log, model)
            print(f"(b) projected on one H200, the whole job (search and verdict, model load excluded): "
                  f"{projection(log, model)}")
            print(f"    {whole['rows'] / whole['calls']:.1f} rows per backend call ({whole['calls']} calls, "
                  f"{whole['generate_calls']} of them generating {whole['generated_rows']} prompts)")

if __name__ == "__main__":
    main()
