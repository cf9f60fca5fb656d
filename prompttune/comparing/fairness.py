"""Evidence that every arm played by the same rules, each piece read from a source other than the
code that enforced the rule, so that a broken rule shows as a failed check:

- Spend. `ModelWatch` wraps the one shared model and logs every request it serves with the tokens
  the model reports. In an arm's search window, those must equal what the arm was charged: its
  ledger less the shared-cache hits its metered view charged (they reached no model). An arm that
  asks the model behind its ledger, or a ledger that charges calls nobody made, fails the check.
- Caps. What the model served plus the charged cache hits, against the cap. An arm that left more
  than a tenth of the matched cap unspent fails the matched-budget check (it was not out-searched,
  it stopped): optimizers are compared at equal spend, or the comparison says it was not
  (`--allow-underspend` turns the failure into a warning).
- The same question. Hashes of each arm's baseline prompt spec and of the test example ids its
  verdict scored: one hash of each for all arms.
- Isolation. It is structural: an arm's search evaluator is built over `task.without_test()`, so a
  test example id is refused (PermissionError) and the test texts are not even in its memory. The
  watch checks the outcome independently: it notes whether a served prompt quotes a test text.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING, Callable, Iterable, Literal, Mapping, Sequence

from prompttune.backends.backend import Backend, Request, WrappedBackend
from prompttune.core.run_files import read_prompt, read_trials
from prompttune.core.types import (
    ChoiceRequest,
    ChoiceResult,
    Example,
    GenerateRequest,
    GenerateResult,
    ScoreRequest,
    ScoreResult,
)
from prompttune.results.arms import Served
from prompttune.results.compare import Cap, Check
from prompttune.tasks.pools import seen_in_tuning
from prompttune.tasks.task import Task

if TYPE_CHECKING:
    from prompttune.results.arms import ArmRun

KEY = 12  # characters that index a test text; shorter texts are too common to watch for
FULL_SPEND = 0.9  # an arm that spent less of the matched cap is flagged


def _texts(examples: Iterable) -> set[str]:
    return {value.strip() for ex in examples for value in ex.fields.values()}


class ModelWatch(WrappedBackend):
    """Passes requests through to the shared model and logs each one it serves: its tokens, and
    whether its prompt quotes a test text.

    Test texts that also occur verbatim in train or dev cannot tell a leak from a duplicate,
    so they are left out of the watch (`ambiguous` counts them).
    """

    def __init__(self, inner: Backend, task: Task) -> None:
        super().__init__(inner)
        self._log: list[tuple[bool, int]] = []  # per served request: quoted a test text, tokens
        self.watch(task)

    def watch(self, task: Task) -> None:
        """Watch for `task`'s test texts from now on (each seed of a comparison draws its own test split)."""
        visible = _texts(ex for name in ("train", "dev") for ex in task.splits[name])
        test = {t for t in _texts(task.splits["test"]) if len(t) >= KEY}
        duplicated = {t for t in test if any(t in v for v in visible)}
        self.ambiguous = len(duplicated)
        self.watched = len(test) - len(duplicated)
        self._probes: dict[str, list[str]] = {}
        for text in test - duplicated:
            self._probes.setdefault(text[:KEY], []).append(text)

    def _quotes_test(self, text: str) -> bool:
        for pos in range(len(text) - KEY + 1):
            for probe in self._probes.get(text[pos:pos + KEY], ()):
                if text.startswith(probe, pos):
                    return True
        return False

    def _note(self, requests: Sequence[Request],
              results: Sequence[ScoreResult | GenerateResult | ChoiceResult]) -> None:
        self._log += [(self._quotes_test(r.text), out.prompt_tokens + out.completion_tokens)
                      for r, out in zip(requests, results)]

    def describe(self) -> str:
        return self.inner.describe()

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        return self._watched(self.inner.score, requests)

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        return self._watched(self.inner.generate, requests)

    def choose(self, requests: list[ChoiceRequest]) -> list[ChoiceResult]:
        return self._watched(self.inner.choose, requests)

    def _watched(self, call: Callable[[list], list], requests: list) -> list:
        """`call(requests)`, each request logged (does it quote a test text, what it cost)."""
        results = call(requests)
        self._note(requests, results)
        return results

    def mark(self) -> int:
        """The current end of the request log; two marks bound a window."""
        return len(self._log)

    def served(self, start: int, stop: int) -> Served:
        window = self._log[start:stop]
        return Served(len(window), sum(tokens for _, tokens in window), sum(quoted for quoted, _ in window))


def caps_of(match: Literal["calls", "tokens"], cap_calls: int, cap_tokens: int | None) -> list[Cap]:
    """The matched cap first; the other, when set, is a ceiling that holds as well."""
    caps = [Cap("calls", cap_calls)] + ([Cap("tokens", cap_tokens)] if cap_tokens is not None else [])
    return sorted(caps, key=lambda cap: cap.unit != match)


@dataclass(frozen=True)
class Spend:
    """One arm's charged search spend over its seeds."""

    calls_mean: float
    calls_max: int
    tokens_mean: float
    tokens_max: int

    @classmethod
    def of(cls, runs: Sequence["ArmRun"]) -> "Spend":
        calls, tokens = [r.search.calls for r in runs], [r.search.tokens for r in runs]
        return cls(mean(calls), max(calls), mean(tokens), max(tokens))


def fingerprint(value: object) -> str:
    """First 12 hex digits of the SHA-256 of `value` as canonical JSON."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:12]


def _name(run: "ArmRun") -> str:
    return f"{run.arm} s{run.seed}"


def _logged_demo_ids(run_dir: Path) -> set[str]:
    """Demo ids named anywhere in an arm's trial log and chosen prompt."""
    ids = {demo for trial in read_trials(run_dir) for demo in trial.get("demo_ids", [])}
    return ids | set(read_prompt(run_dir, "shipped")["spec"]["demo_ids"])


def _served_check(runs: list["ArmRun"]) -> Check:
    off = []
    for r in runs:
        charged = (r.search.calls - r.foreign_calls, r.search.tokens - r.foreign_tokens)
        if (r.served.requests, r.served.tokens) != charged:
            off.append(f"{_name(r)}: the model served {r.served.requests} requests / {r.served.tokens} tokens, "
                       f"the ledger charged {charged[0]} / {charged[1]} besides shared-cache hits")
    return Check("every request and token the model served to an arm's search was charged to that arm, and "
                 "nothing else was (counted at the model, against the ledger less its shared-cache hits)", not off,
                 "; ".join(off) or f"{sum(r.served.requests for r in runs)} requests and "
                 f"{sum(r.served.tokens for r in runs)} tokens served to {len(runs)} searches, all charged")


def _cap_check(cap: Cap, runs: list["ArmRun"]) -> Check:
    over = [f"{_name(r)}: {cap.served(r)}" for r in runs if cap.served(r) > cap.limit]
    return Check(f"no arm's search spent more than {cap.limit} {cap.unit} (served by the model plus shared-cache "
                 f"hits)", not over, ", ".join(over) or f"max {max(cap.served(r) for r in runs)} {cap.unit}")


def _full_spend_check(cap: Cap, runs: list["ArmRun"], allow_underspend: bool) -> Check:
    def share(r: "ArmRun") -> str:
        return f"{_name(r)}: {cap.charged(r)}/{cap.limit} {cap.unit} ({cap.charged(r) / cap.limit:.0%})"

    low = [share(r) for r in runs if cap.charged(r) < FULL_SPEND * cap.limit]
    return Check(f"every arm spent at least {FULL_SPEND:.0%} of its {cap.limit}-{cap.unit} cap", not low,
                 ", ".join(low) or f"least: {share(min(runs, key=cap.charged))}",
                 level="warning" if allow_underspend else "error")


def _same_within_seeds(claim: str, runs: list["ArmRun"], value: Callable[["ArmRun"], object]) -> Check:
    """One hash of `value` for all the runs of each seed."""
    split: list[str] = []
    for seed in sorted({r.seed for r in runs}):
        by_hash: dict[str, list[str]] = {}
        for r in (r for r in runs if r.seed == seed):
            by_hash.setdefault(fingerprint(value(r)), []).append(_name(r))
        if len(by_hash) > 1:
            split.append("; ".join(f"sha256 {h}: {', '.join(names)}" for h, names in by_hash.items()))
    return Check(claim, not split, " | ".join(split) or f"one hash per seed for all {len(runs)} runs")


def distinct_draws_check(tasks: Mapping[int, Task]) -> Check:
    hashes = {seed: fingerprint(sorted(ex.id for ex in task.splits["test"])) for seed, task in tasks.items()}
    repeated = [seed for seed, h in hashes.items() if list(hashes.values()).count(h) > 1]
    return Check("each seed drew its own test split (hash of its test ids)", not repeated,
                 f"seeds {', '.join(map(str, repeated))} share a test split" if repeated
                 else ", ".join(f"s{seed} {h}" for seed, h in hashes.items()))


def reporting_pool_check(tasks: Mapping[int, Task], tuning_pool: Sequence[Example]) -> Check:
    """A run on the reporting pool tested on examples no tuning draw can hold: each seed's test split against every
    example of the task's tuning pool, by text (`prompttune.tasks.pools.seen_in_tuning`)."""
    seen = {seed: seen_in_tuning(task.splits["test"], tuning_pool) for seed, task in tasks.items()}
    tested = sum(len(task.splits["test"]) for task in tasks.values())
    return Check("no test example of any seed appears in any tuning draw (reporting pool)",
                 not any(seen.values()),
                 "; ".join(f"s{seed}: {', '.join(ids[:3])}{' …' if len(ids) > 3 else ''} ({len(ids)})"
                           for seed, ids in seen.items() if ids)
                 or f"0 of {tested} test examples are in the {len(tuning_pool)}-example tuning pool")


def fairness_checks(tasks: Mapping[int, Task], runs: list["ArmRun"], caps: list[Cap], verdict_calls: int,
                    watch: ModelWatch, allow_underspend: bool = False) -> list[Check]:
    """`tasks`: each seed's data draw; `caps`: the matched cap first (`caps_of`); `allow_underspend`
    makes an arm under 90% of the cap a warning rather than a failed check."""
    ids = {seed: {name: {ex.id for ex in task.splits[name]} for name in ("train", "dev", "test")}
           for seed, task in tasks.items()}
    overlapping = [f"s{seed}" for seed, split in ids.items()
                   if split["test"] & (split["train"] | split["dev"]) or split["train"] & split["dev"]]
    sizes = next(iter(ids.values()))
    checks = [
        Check("splits are disjoint at each seed", not overlapping, ", ".join(overlapping) or
              f"train {len(sizes['train'])} / dev {len(sizes['dev'])} / test {len(sizes['test'])} example ids per seed"),
        *([distinct_draws_check(tasks)] if len(tasks) > 1 else []),
        _served_check(runs),
        *(_cap_check(cap, runs) for cap in caps),
        _full_spend_check(caps[0], runs, allow_underspend),
    ]
    leaks = [f"{_name(r)}: {r.served.leaks}" for r in runs if r.served.leaks]
    checks.append(Check("no search-time model request quoted a test example of its seed", not leaks,
                        ", ".join(leaks) or f"{sum(r.served.requests for r in runs)} search requests watched "
                        f"for their seed's test texts ({watch.watched} at the last seed; {watch.ambiguous} also "
                        f"occur in its train/dev and are not watched)"))
    demos = {_name(r): (_logged_demo_ids(r.run_dir), ids[r.seed]["train"]) for r in runs}
    stray = [name for name, (used, train) in demos.items() if not used <= train]
    with_demos = sum(bool(used) for used, _ in demos.values())
    checks.append(Check("every demo in the trial logs and chosen prompts is a train example of its seed", not stray,
                        ", ".join(stray) or f"{len(set().union(*(used for used, _ in demos.values())))} distinct demo "
                        f"ids in the trials.jsonl and best_prompt.json of {with_demos} of {len(runs)} runs (the others "
                        f"used no demos)"))
    checks.append(_same_within_seeds("at each seed, every run was confirmed against the same baseline prompt "
                                     "(hash of its spec)", runs, lambda r: asdict(r.baseline)))
    checks.append(_same_within_seeds("at each seed, every run's verdict scored the same test examples (hash of "
                                     "their ids)", runs, lambda r: sorted(r.test_ids)))
    mismatched = [_name(r) for r in runs
                  if abs(sum(r.test_correct) / len(r.test_correct) - r.confirmation.best_accuracy) > 1e-12]
    checks.append(Check("re-scoring the winners for the pairwise tests reproduced every verdict from cache",
                        not mismatched and verdict_calls == 0,
                        ", ".join(mismatched) or f"{verdict_calls} model calls"))
    return checks
