"""Evidence that every arm played by the same rules: caps held, and the test split stayed unseen.

Isolation is structural — an arm's search evaluator is built over `task.without_test()`, so a
test example id is refused (PermissionError) and the test texts are not even in its memory.
`LeakWatch` checks the outcome independently of that code path: it sees every request that
reaches the model and notes whether the prompt quotes a test example's text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from prompttune.backends.base import Backend
from prompttune.core.types import GenerateRequest, GenerateResult, Prompt, ScoreRequest, ScoreResult
from prompttune.tasks.base import Task

if TYPE_CHECKING:
    from prompttune.compare.arms import ArmRun

KEY = 12  # characters that index a test text; shorter texts are too common to watch for


def _texts(examples: Iterable) -> set[str]:
    return {value.strip() for ex in examples for value in ex.fields.values()}


class LeakWatch(Backend):
    """Passes requests through to the shared backend and flags those that quote a test text.

    Test texts that also occur verbatim in train or dev cannot tell a leak from a duplicate,
    so they are left out of the watch (`ambiguous` counts them).
    """

    def __init__(self, inner: Backend, task: Task) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        visible = _texts(ex for name in ("train", "dev") for ex in task.splits[name])
        test = {t for t in _texts(task.splits["test"]) if len(t) >= KEY}
        duplicated = {t for t in test if any(t in v for v in visible)}
        self.ambiguous = len(duplicated)
        self.watched = len(test) - len(duplicated)
        self._probes: dict[str, list[str]] = {}
        for text in test - duplicated:
            self._probes.setdefault(text[:KEY], []).append(text)
        self.flags: list[bool] = []

    def _quotes_test(self, text: str) -> bool:
        for pos in range(len(text) - KEY + 1):
            for probe in self._probes.get(text[pos:pos + KEY], ()):
                if text.startswith(probe, pos):
                    return True
        return False

    def to_text(self, prompt: Prompt) -> str:
        return self.inner.to_text(prompt)

    def count_tokens(self, texts: Sequence[str], continuation: bool = False) -> list[int]:
        return self.inner.count_tokens(texts, continuation)

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        self.flags += [self._quotes_test(r.text) for r in requests]
        return self.inner.score(requests)

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        self.flags += [self._quotes_test(r.text) for r in requests]
        return self.inner.generate(requests)

    def leaks(self, start: int, stop: int) -> int:
        """Requests in [start, stop) of the request log that quoted a test example."""
        return sum(self.flags[start:stop])


@dataclass
class Check:
    claim: str
    ok: bool
    detail: str


def _logged_demo_ids(run_dir: Path) -> set[str]:
    """Demo ids named anywhere in an arm's trial log and chosen prompt."""
    ids: set[str] = set()
    trials = run_dir / "trials.jsonl"
    for line in trials.read_text().splitlines() if trials.is_file() else []:
        ids.update(json.loads(line).get("demo_ids", []))
    best = json.loads((run_dir / "best_prompt.json").read_text())
    ids.update(best["spec"]["demo_ids"])
    return ids


def fairness_checks(task: Task, runs: list["ArmRun"], cap_calls: int, cap_tokens: int | None,
                    verdict_calls: int, watch: LeakWatch) -> list[Check]:
    ids = {name: {ex.id for ex in task.splits[name]} for name in ("train", "dev", "test")}
    over = [f"{r.arm} s{r.seed}: {r.search.calls}" for r in runs if r.search.calls > cap_calls]
    checks = [
        Check("splits are disjoint", not (ids["test"] & (ids["train"] | ids["dev"])) and not ids["train"] & ids["dev"],
              f"train {len(ids['train'])} / dev {len(ids['dev'])} / test {len(ids['test'])} example ids"),
        Check(f"no arm spent more than {cap_calls} search calls", not over,
              ", ".join(over) or f"max {max(r.search.calls for r in runs)} calls"),
    ]
    if cap_tokens is not None:
        over_tokens = [f"{r.arm} s{r.seed}: {r.search.tokens}" for r in runs if r.search.tokens > cap_tokens]
        checks.append(Check(f"no arm spent more than {cap_tokens} search tokens", not over_tokens,
                            ", ".join(over_tokens) or f"max {max(r.search.tokens for r in runs)} tokens"))
    leaks = [f"{r.arm} s{r.seed}: {r.test_leaks}" for r in runs if r.test_leaks]
    checks.append(Check("no search-time model request quoted a test example", not leaks,
                        ", ".join(leaks) or f"{sum(r.search_requests for r in runs)} search requests watched "
                        f"for {watch.watched} test texts ({watch.ambiguous} test texts also occur in train/dev "
                        f"and are not watched)"))
    stray = [f"{r.arm} s{r.seed}" for r in runs if not _logged_demo_ids(r.run_dir) <= ids["train"]]
    checks.append(Check("every demo in the trial logs and chosen prompts is a train example", not stray,
                        ", ".join(stray) or "trials.jsonl and best_prompt.json of every run"))
    baselines = {r.confirmation.baseline_accuracy for r in runs}
    checks.append(Check("every run confirmed against the same baseline on the same test split",
                        len(baselines) == 1 and len({r.confirmation.n for r in runs}) == 1,
                        f"baseline test accuracy {', '.join(f'{b:.4f}' for b in sorted(baselines))}"))
    mismatched = [f"{r.arm} s{r.seed}" for r in runs
                  if abs(sum(r.test_correct) / len(r.test_correct) - r.confirmation.best_accuracy) > 1e-12]
    checks.append(Check("re-scoring the winners for the pairwise tests reproduced every verdict from cache",
                        not mismatched and verdict_calls == 0,
                        ", ".join(mismatched) or f"{verdict_calls} model calls"))
    return checks
