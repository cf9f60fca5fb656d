"""Wall-time estimates from a measured call rate."""

from __future__ import annotations

from prompttune.backends.base import ScoreRequest, estimate_seconds, measure_rate
from prompttune.backends.oracle import SyntheticOracleBackend
from tests.conftest import synthetic_task


def test_measured_rate_turns_a_budget_into_seconds() -> None:
    task = synthetic_task()
    examples = task.splits["dev"]
    backend = SyntheticOracleBackend(examples, lambda text: 0.7)
    requests = [ScoreRequest(f"Input: {e.fields['text']}\nAnswer:", (" red", " green", " blue")) for e in examples]
    rate = measure_rate(backend, requests)
    assert rate > 0
    assert estimate_seconds(2000, rate) == 2000 / rate
    assert estimate_seconds(100, 4.0) == 25.0
