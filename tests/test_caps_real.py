"""The token cap with the real embedded model: the reserve is the exact token count, and a tight
--budget-tokens is never passed (small: 8 examples per split)."""

from __future__ import annotations

from pathlib import Path

import pytest

from prompttune.backends.backend import Backend
from prompttune.core.config import RunConfig
from prompttune.core.storage import JsonlStorage
from prompttune.core.types import GenerateRequest, Prompt, ScoreRequest
from prompttune.engine.study import run_study
from tests.support import CountingBackend, model_calls

pytestmark = pytest.mark.integration

LABELS = (" World", " Sports", " Business", " Sci/Tech")


@pytest.fixture(scope="module")
def backend(embedded_model: Backend) -> CountingBackend:
    return CountingBackend(embedded_model)


def test_the_reserve_is_the_token_count_the_model_reports(backend: CountingBackend) -> None:
    texts = [backend.to_text(Prompt(text="Article: Stocks fell sharply on Monday.\nTopic:")),
             backend.to_text(Prompt(messages=(("user", "Classify: the match ended 2-1 after extra time."),))),
             backend.to_text(Prompt(text="Überraschung: ein Gerät für 3 € — naïve café test\nTopic:"))]
    scores = [ScoreRequest(t, LABELS) for t in texts]
    assert backend.token_bounds(scores) == [r.prompt_tokens + r.completion_tokens for r in backend.score(scores)]
    generations = [GenerateRequest(t, 6) for t in texts]
    for bound, result in zip(backend.token_bounds(generations), backend.generate(generations)):
        assert bound - 6 == result.prompt_tokens and result.completion_tokens <= 6


def test_a_tight_token_cap_is_never_passed_with_the_real_model(backend: CountingBackend, data_dir: Path,
                                                               tmp_path: Path) -> None:
    cap = 1500  # the baseline and about one candidate on 8 dev examples
    config = RunConfig(task="agnews", optimizer="random", data_dir=str(data_dir), budget=200, budget_tokens=cap,
                       train_size=8, dev_size=8, test_size=8, runs_dir=str(tmp_path))
    before = backend.calls
    result = run_study(config, backend=backend)
    ledger = result.search_ledger
    assert result.outcome.stopped_by_budget and ledger.calls < config.budget  # the token cap stopped it
    assert ledger.tokens <= cap and ledger.reserved_tokens == 0
    assert all(t["tokens_spent"] <= cap for t in JsonlStorage(result.run_dir / "trials.jsonl").load())
    assert backend.calls - before == model_calls(result)
