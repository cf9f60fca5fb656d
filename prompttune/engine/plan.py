"""`optimize --dry-run` and `compare --dry-run`: what a run or a comparison would do and cost, said
before it spends anything.

Each is checked as the real command checks it (`checked_search` for a run; `check_compare`, which
runs it for every arm at every seed's draw, for a comparison); the only model calls are one short
probe — the baseline prompt on a handful of dev examples, on a private ledger and an in-memory
cache — whose measured rate turns the call counts into a wall-time estimate.
"""

from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass

from prompttune.backends.capabilities import Capabilities
from prompttune.backends.decode_cost import decoding_line
from prompttune.backends.factory import build_backend
from prompttune.comparing.arms import arm_config
from prompttune.comparing.coverage import MODES
from prompttune.comparing.fairness import caps_of
from prompttune.core.config import RunConfig
from prompttune.engine.compare_request import CompareRequest, check_compare
from prompttune.engine.setup import load_space, run_contract
from prompttune.engine.study import checked_search
from prompttune.optimizers import SearchContext
from prompttune.optimizers.registry import lookup
from prompttune.reports.compare_report import caps_text
from prompttune.reports.optimize_report import confirmable_gain
from prompttune.results.compare import Cap
from prompttune.scoring import contract
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import build_evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.tasks import load_run_task
from prompttune.tasks.task import Task

PROBE_EXAMPLES = 8


@dataclass(frozen=True)
class Probe:
    """The baseline timed on a few dev examples: the model's rate, so the times a plan gives are estimates; and
    what the target honours."""

    model: str
    calls: int
    tokens_per_call: float
    seconds_per_call: float
    capabilities: Capabilities
    decoding: str | None = None  # what a call's texts cost together, where reflect's default reads it

    def tokens_text(self, calls: int, cap_tokens: int | None) -> str:
        """The token cap, else what `calls` calls cost at the probe's tokens per call."""
        if cap_tokens is not None:
            return f"at most {cap_tokens} tokens (--budget-tokens)"
        return (f"about {calls * self.tokens_per_call:,.0f} tokens at the probe's {self.tokens_per_call:.0f} per call "
                "(no token cap)")

    def wall_line(self, parts: dict[str, int], note: str = "less where the cache answers") -> str:
        """Minutes per part (name → at most that many model calls), timed at the probe's rate."""
        times = ", ".join(f"{name} at most about {calls * self.seconds_per_call / 60:.1f} min"
                          for name, calls in parts.items())
        return (f"wall time, estimated from a probe of {self.calls} calls ({self.seconds_per_call * 1000:.0f} ms per "
                f"call): {times} ({note})")


def probe(config: RunConfig, task: Task, context: SearchContext, declared: bool,
          examples: int = PROBE_EXAMPLES) -> Probe:
    """What the target honours (a contract it cannot honour is one line, as the run says it), then time the
    baseline of `context` on its first `examples` dev examples of `task`."""
    ledger = BudgetLedger()
    with closing(build_backend(config)) as model, closing(ResultCache(":memory:")) as cache:
        capabilities = model.capabilities()
        capabilities.require(context.serve, declared)
        evaluator = build_evaluator(config, model, task.splits["dev"], task.splits["train"], cache, ledger)
        started = time.perf_counter()
        evaluator.evaluate(context.space.default_candidate().spec, context.dev_ids[:examples])
        seconds = time.perf_counter() - started
        reflect_default = config.optimizer == "reflect" and not {"parents", "decode_together"} & set(
            config.optimizer_options)
        return Probe(model.model_id, ledger.calls, ledger.tokens / max(ledger.calls, 1),
                     seconds / max(ledger.calls, 1), capabilities,
                     decoding_line(model.batch_decode_ratio) if reflect_default else None)


def strategy_line(config: RunConfig, context: SearchContext) -> str | None:
    """What the strategy fixes before it searches, where it does: its rounds (sh), or a DSPy arm's
    settings sized to the cap."""
    return lookup(config.optimizer).describe(config, context)


@dataclass(frozen=True)
class RunPlan:
    """A run's strategy and bounds, and the probe that times them."""

    optimizer: str
    strategy: str | None  # `strategy_line`
    search_calls: int  # the cap: the search may spend up to this many
    search_tokens: int | None  # the token cap, if one was set
    verdict_calls: int  # at most: baseline and winner on every test example
    probe: Probe
    test_size: int
    alpha: float
    confirm_top: int
    contract: str  # the serving contract's line, as the run's first line says it

    def lines(self) -> list[str]:
        """The plan as `optimize --dry-run` prints it."""
        return [f"dry run: {self.optimizer} on {self.probe.model}; no search call made", self.contract,
                self.probe.capabilities.describe(),
                *([self.strategy] if self.strategy else []),
                *([self.probe.decoding] if self.probe.decoding else []),
                f"search: at most {self.search_calls} model calls (--budget), "
                f"{self.probe.tokens_text(self.search_calls, self.search_tokens)}",
                f"held-out verdict: at most {self.verdict_calls} calls (baseline and winner on every test "
                "example), outside the budget",
                *self.power_lines(),
                self.probe.wall_line({"search": self.search_calls, "verdict": self.verdict_calls})]

    def power_lines(self) -> list[str]:
        """The gain the test split confirms with 80% power, and a warning where it is more than 5 points. The
        baseline's accuracy is unknown before the run; the flip model needs it only to bound the gain, so
        the figure leaves it out (`smallest_confirmable_gain`)."""
        statement, warning = confirmable_gain(self.test_size, self.alpha, self.confirm_top)
        return [f"held-out power: {statement}", *([f"warning: {warning}"] if warning else [])]


def plan_run(config: RunConfig, probe_examples: int = PROBE_EXAMPLES) -> RunPlan:
    """Check the run as `run_study` would, then time the baseline on `probe_examples` dev examples."""
    task = load_run_task(config)
    visible, context, _ = checked_search(config, task, load_space(config, task))
    test_size = len(task.splits["test"])
    serve, declared = run_contract(config, task)
    return RunPlan(config.optimizer, strategy_line(config, context), config.budget, config.budget_tokens,
                   2 * test_size, probe(config, visible, context, declared, probe_examples), test_size, config.alpha,
                   config.confirm_top, contract.contract_line(serve, declared))


@dataclass(frozen=True)
class ArmPlan:
    """One compared arm: what it searches and holds, and what its strategy fixes before searching."""

    arm: str
    searched: tuple[str, ...]
    held: tuple[str, ...]
    strategy: str | None


@dataclass(frozen=True)
class ComparePlan:
    """A comparison's arms, seeds, caps and call bounds, and the one probe that times them."""

    mode: str
    arms: list[ArmPlan]
    seeds: list[int]
    split_seeds: list[int]
    caps: list[Cap]  # the matched cap first
    test_sizes: list[int]  # per seed
    probe: Probe

    @property
    def search_calls(self) -> int:
        """At most: every arm-seed spends its call cap (or, matched on tokens, its call ceiling)."""
        return len(self.arms) * len(self.seeds) * next(cap.limit for cap in self.caps if cap.unit == "calls")

    @property
    def verdict_calls(self) -> int:
        """At most: every arm-seed's baseline and pick on its seed's test split."""
        return 2 * len(self.arms) * sum(self.test_sizes)

    @property
    def equal_spend_calls(self) -> int:
        """At most: every arm-seed's pick at the smallest spend, on its seed's test split (mostly scored already)."""
        return len(self.arms) * sum(self.test_sizes)

    def lines(self) -> list[str]:
        """The plan as `compare --dry-run` prints it."""
        runs = len(self.arms) * len(self.seeds)
        tokens = next((cap.limit for cap in self.caps if cap.unit == "tokens"), None)
        total = self.search_calls + self.verdict_calls + self.equal_spend_calls
        return [
            f"dry run: compare, {MODES[self.mode]} (--mode {self.mode}), {len(self.arms)} optimizers × "
            f"{len(self.seeds)} seeds on {self.probe.model}; no search call made",
            self.probe.capabilities.describe(),
            f"checked as compare checks them before any model loads, each arm at each seed's data draw (seeds "
            f"{', '.join(map(str, self.seeds))}; split seeds {', '.join(map(str, self.split_seeds))}): the "
            "optimizer and its options, dev split and cap, what it searches of the space, its schedule or DSPy's "
            "sizing to the cap",
            *(f"arm {a.arm}: at most {caps_text(self.caps)} per seed; searches {', '.join(a.searched)}; holds "
              f"{', '.join(a.held) or 'nothing'} at the baseline" + (f"; {a.strategy}" if a.strategy else "")
              for a in self.arms),
            f"search: at most {self.search_calls} calls in all ({len(self.arms)} arms × {len(self.seeds)} seeds), "
            + (f"at most {tokens} tokens each (--budget-tokens)" if tokens is not None else
               self.probe.tokens_text(self.search_calls, None)),
            f"held-out verdicts: at most {self.verdict_calls} calls (each of the {runs} runs: baseline and pick on "
            f"its seed's {', '.join(map(str, sorted(set(self.test_sizes))))} test examples), outside the cap; "
            f"accuracy at equal spend: at most {self.equal_spend_calls} more (most already scored by the verdicts)",
            f"total: at most {total} calls",
            self.probe.wall_line({"search": self.search_calls, "verdicts": self.verdict_calls,
                                  "equal-spend tests": self.equal_spend_calls, "in all": total},
                                 "one arm-seed at a time; less where the shared cache answers"),
        ]


def plan_compare(request: CompareRequest, probe_examples: int = PROBE_EXAMPLES) -> ComparePlan:
    """Check the comparison as `run_compare` would (`check_compare`), then time the baseline once, on
    `probe_examples` dev examples of the first seed's draw."""
    config, draws = check_compare(request)
    arms, seeds, options = request.arms, request.seeds, request.options
    first = draws[seeds[0]]
    plans = [ArmPlan(arm, first.coverage[arm].searched, first.coverage[arm].held,
                     strategy_line(arm_config(first.config, arm, options, first.coverage), first.contexts[arm]))
             for arm in arms]
    return ComparePlan(request.mode, plans, seeds, [d.config.split_seed for d in draws.values()],
                       caps_of(request.match, config.budget, config.budget_tokens),
                       [len(d.task.splits["test"]) for d in draws.values()],
                       probe(config, first.task, first.contexts[arms[0]], run_contract(request.config, first.task)[1],
                             probe_examples))
