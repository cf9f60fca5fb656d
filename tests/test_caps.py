"""Hard caps on the synthetic oracle: tokens reserved before a call (zero overshoot of
--budget-tokens), a refused request never reaches the backend, proposer and embedding calls go
through the ledger and the cache, and a shared cache charges them like the calls they replace."""

from __future__ import annotations

import hashlib
import io
import time
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from prompttune.core.errors import BudgetExhausted
from prompttune.core.storage import JsonlStorage
from prompttune.engine.run_steps import WallEstimate
from prompttune.engine.study import run_study
from prompttune.optimizers import embeddings
from prompttune.optimizers.proposer import Proposer
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import Evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.metered_cache import MeteredCache
from prompttune.search_spaces import default_space
from tests.support import CountingBackend, oracle_config, oracle_for, task_of


def _evaluator(config, backend: CountingBackend, cache, ledger: BudgetLedger) -> Evaluator:
    task = task_of(config)
    visible = {e.id: e for s in ("train", "dev") for e in task.splits[s]}
    return Evaluator(backend, visible, {e.id: e for e in task.splits["train"]}, cache, ledger)


def test_a_batch_past_the_token_cap_is_refused_before_the_backend_sees_it(tmp_path: Path) -> None:
    config = oracle_config(tmp_path)
    spec = default_space(task_of(config)).default_candidate().spec
    dev = [e.id for e in task_of(config).splits["dev"]][:30]
    measured = BudgetLedger()
    _evaluator(config, oracle_for(config), ResultCache(), measured).evaluate(spec, dev)
    cost = measured.tokens  # what the 30 calls really cost

    backend, capped = oracle_for(config), BudgetLedger(cap_calls=100, cap_tokens=cost - 1)
    with pytest.raises(BudgetExhausted, match=f"up to {cost} tokens requested, {cost - 1} left"):
        _evaluator(config, backend, ResultCache(), capped).evaluate(spec, dev)
    assert backend.calls == 0
    assert (capped.calls, capped.tokens, capped.reserved_tokens, dict(capped.calls_by_kind)) == (0, 0, 0, {})

    exact = BudgetLedger(cap_tokens=cost)  # the reserve is exact on the oracle: a batch that fits runs
    _evaluator(config, backend, ResultCache(), exact).evaluate(spec, dev)
    assert (backend.calls, exact.tokens, exact.reserved_tokens) == (30, cost, 0)


def test_shared_hits_and_misses_are_reserved_together(tmp_path: Path) -> None:
    """Hits another run paid for cost their recorded tokens, in the same reservation as the misses."""
    config = oracle_config(tmp_path)
    spec = default_space(task_of(config)).default_candidate().spec
    dev = [e.id for e in task_of(config).splits["dev"]][:30]
    full = BudgetLedger()
    _evaluator(config, oracle_for(config), ResultCache(), full).evaluate(spec, dev)
    shared, first = ResultCache(), BudgetLedger()
    _evaluator(config, oracle_for(config), MeteredCache(shared), first).evaluate(spec, dev[:20])

    backend, capped = oracle_for(config), BudgetLedger(cap_tokens=full.tokens - 1)
    evaluator = _evaluator(config, backend, MeteredCache(shared), capped)
    with pytest.raises(BudgetExhausted):
        evaluator.evaluate(spec, dev)  # 20 hits at their recorded tokens + 10 misses at their bound
    assert (backend.calls, capped.calls, capped.tokens, evaluator.cache.foreign_calls) == (0, 0, 0, 0)
    capped.cap_tokens = full.tokens
    evaluator.evaluate(spec, dev)
    assert (backend.calls, capped.tokens) == (10, full.tokens)
    assert dict(capped.calls_by_kind) == {"score": 10, "score (shared cache)": 20}


def test_an_answer_fetched_ahead_is_a_call_even_if_another_run_stored_it_first(tmp_path: Path) -> None:
    """Compared arms share the cache: when the model answered a request ahead for one arm and another arm
    stored the same key before the first asked for it, the first is charged a call (the model served it),
    not a shared-cache hit, so compare's count of what the model served equals what the ledger charged."""
    config = oracle_config(tmp_path)
    spec = default_space(task_of(config)).default_candidate().spec
    dev = [e.id for e in task_of(config).splits["dev"]][:20]
    shared, backend, ledger = ResultCache(), oracle_for(config), BudgetLedger()
    evaluator = _evaluator(config, backend, MeteredCache(shared), ledger)
    evaluator.prefetch([(spec, dev[:10]), (spec, dev[10:])])
    assert backend.calls == 20
    _evaluator(config, oracle_for(config), MeteredCache(shared), BudgetLedger()).evaluate(spec, dev[:10])
    evaluator.evaluate(spec, dev[:10])
    evaluator.evaluate(spec, dev[10:])
    assert (backend.calls, ledger.calls, evaluator.cache.foreign_calls) == (20, 20, 0)
    assert dict(ledger.calls_by_kind) == {"score": 20}


def test_a_failed_call_leaves_the_ledger_as_it_was(tmp_path: Path) -> None:
    config = oracle_config(tmp_path)
    spec = default_space(task_of(config)).default_candidate().spec
    backend, ledger = oracle_for(config), BudgetLedger(cap_tokens=10_000)

    def down(requests):
        raise ConnectionError("server gone")
    backend.inner.score = down
    with pytest.raises(ConnectionError):
        _evaluator(config, backend, ResultCache(), ledger).evaluate(spec, [e.id for e in task_of(config).splits["dev"]])
    assert (ledger.calls, ledger.tokens, ledger.reserved_tokens, dict(ledger.calls_by_kind)) == (0, 0, 0, {})


@pytest.mark.parametrize("optimizer", ["random", "mipro"])
def test_a_tight_token_cap_is_never_passed(tmp_path: Path, optimizer: str) -> None:
    cap = 2500  # about a third of what 300 calls cost on this task
    config = oracle_config(tmp_path, optimizer=optimizer, budget_tokens=cap)
    result = run_study(config, backend=oracle_for(config))
    ledger = result.search_ledger
    assert result.outcome.stopped_by_budget and ledger.calls < config.budget  # the token cap stopped it
    assert ledger.tokens <= cap and ledger.reserved_tokens == 0
    assert all(t["tokens_spent"] <= cap for t in JsonlStorage(result.run_dir / "trials.jsonl").load())
    assert f"of the token cap {cap}; stopped by the cap" in (result.run_dir / "report.md").read_text()
    if optimizer == "mipro":
        assert ledger.calls_by_kind["propose"] > 0


def test_proposer_calls_are_cached_by_model_prompt_and_length(tmp_path: Path) -> None:
    config = oracle_config(tmp_path)
    backend, shared, ledger = oracle_for(config), ResultCache(), BudgetLedger()
    evaluator = _evaluator(config, backend, MeteredCache(shared), ledger)
    proposer = Proposer(backend, evaluator.meter)
    first = proposer("Write an instruction.")
    assert proposer("Write an instruction.") == first and backend.calls == ledger.calls == 1
    proposer("Write an instruction.", max_new_tokens=8)
    other_model = oracle_for(config)
    other_model.model_id = "another-proposer"
    Proposer(other_model, evaluator.meter)("Write an instruction.")
    assert backend.calls == 2 and other_model.calls == 1 and ledger.calls == 3
    assert dict(ledger.calls_by_kind) == {"propose": 3}

    # Another run on the same cache: the hit replaces a call, so it is charged — once.
    again, rerun_backend = BudgetLedger(), oracle_for(config)
    rerun = Proposer(rerun_backend, _evaluator(config, rerun_backend, MeteredCache(shared), again).meter)
    assert rerun("Write an instruction.") == first and rerun("Write an instruction.") == first
    assert rerun_backend.calls == 0
    assert dict(again.calls_by_kind) == {"propose (shared cache)": 1}


def _fake_embedding_model(monkeypatch) -> list[int]:
    """Stands in for all-MiniLM (an optional extra): hash vectors, one token per word; counts texts embedded."""
    embedded = [0]

    def values(texts: list[str]) -> list[dict]:
        embedded[0] += len(texts)
        rng = [np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)) for t in texts]
        return [{"vector": r.normal(size=8).tolist(), "prompt_tokens": len(t.split()), "completion_tokens": 0}
                for r, t in zip(rng, texts)]
    monkeypatch.setattr(embeddings, "embedding_values", values)
    monkeypatch.setattr(embeddings, "count_tokens", lambda texts: [len(t.split()) for t in texts])
    return embedded


def test_embedding_calls_are_charged_and_cached(tmp_path: Path, monkeypatch) -> None:
    embedded = _fake_embedding_model(monkeypatch)
    config = oracle_config(tmp_path)
    ledger = BudgetLedger()
    meter = _evaluator(config, oracle_for(config), ResultCache(), ledger).meter
    texts = ["one two three", "four five", "six"]
    vectors = embeddings.embed(texts, meter)
    assert vectors.dtype == np.float32 and vectors.shape == (3, 8)
    assert np.array_equal(embeddings.embed(texts, meter), vectors)  # read back from the cache, unchanged
    assert embedded[0] == 3 and (ledger.calls, ledger.tokens, dict(ledger.calls_by_kind)) == (3, 6, {"embed": 3})


def test_a_rerun_on_a_shared_cache_pays_for_proposer_and_embedding_hits(tmp_path: Path, monkeypatch) -> None:
    """P2G with k-means representatives, twice on one --cache: the rerun computes nothing, yet is
    charged every call it replayed, proposer and embedding calls included — as much as the first."""
    embedded = _fake_embedding_model(monkeypatch)
    options = {"representatives": "kmeans", "minibatch": 60, "min_errors": 4, "max_depth": 1}
    runs, backends = [], []
    for name in ("first", "rerun"):
        config = oracle_config(tmp_path, optimizer="p2g", optimizer_options=options,
                               cache=str(tmp_path / "shared.sqlite"), runs_dir=str(tmp_path / name))
        backends.append(oracle_for(config))
        runs.append(run_study(config, backend=backends[-1]))
        if name == "first":
            computed = embedded[0]
    first, rerun = (r.search_ledger for r in runs)
    assert first.calls_by_kind["embed"] > 0 and first.calls_by_kind["propose"] > 0
    assert embedded[0] == computed and backends[1].calls == 0  # nothing computed twice
    assert (rerun.calls, rerun.tokens) == (first.calls, first.tokens)
    assert dict(rerun.calls_by_kind) == {f"{kind} (shared cache)": n for kind, n in first.calls_by_kind.items()}
    assert runs[1].shipped.spec == runs[0].shipped.spec


def test_the_wall_time_estimate_counts_only_calls_the_model_answered(tmp_path: Path) -> None:
    """A rerun on a full shared cache pays for every call but computes none: no estimate from those
    charges (it used to promise thousands of calls per second)."""
    config = oracle_config(tmp_path, optimizer="sh", cache=str(tmp_path / "shared.sqlite"))
    outputs = []
    for _ in range(2):
        console = Console(file=io.StringIO(), width=200)
        result = run_study(config, backend=oracle_for(config), console=console, progress=True)
        outputs.append(console.file.getvalue())
    first, rerun = outputs
    assert first.count("model calls/s") == 1 and "model calls/s" not in rerun
    assert result.search_ledger.computed_calls == 0 < result.search_ledger.calls


def test_the_wall_time_estimate_is_timed_on_warm_calls() -> None:
    """The first trial's calls load and warm the model (here 20 calls in 100 s, then 5 calls/s): timed from the
    search's start the rate would be 70 calls in 110 s and promise 47 min where 6 are left. The estimate starts
    timing once 20 calls are answered, reads the rate 50 calls later, says it is at the measured rate, and is
    printed once."""
    times = iter([100.0, 105.0, 110.0])
    estimate = WallEstimate(budget=1870, test_size=300, clock=lambda: next(times))
    assert estimate.line(answered=5, spent=5) is None  # warming up: the clock is not read
    assert estimate.line(answered=20, spent=20) is None  # timing starts
    assert estimate.line(answered=45, spent=45) is None  # 25 calls in 5 s: too few to time
    line = estimate.line(answered=70, spent=70)
    assert line == ("estimate at the measured rate, 5.0 model calls/s once warm (timed after the first 20 calls): "
                    "the search's remaining 1800 calls about 6 min at most (less where the cache answers), the "
                    "verdict about 2 min more")
    assert estimate.line(answered=200, spent=200) is None  # once


def test_a_slow_model_is_timed_for_a_minute_not_fifty_calls() -> None:
    times = iter([0.0, 30.0, 61.0])
    estimate = WallEstimate(budget=1000, test_size=100, clock=lambda: next(times))
    assert estimate.line(answered=20, spent=20) is None and estimate.line(answered=25, spent=25) is None
    assert (line := estimate.line(answered=32, spent=32)) is not None and "rate, 0.2 model calls/s" in line


class SlowRows(CountingBackend):
    """The oracle taking 20 ms a row, so a rate near 50 rows/s is what the model really does."""

    def score(self, requests):
        time.sleep(0.02 * len(requests))
        return super().score(requests)

    def choose(self, requests):
        time.sleep(0.02 * len(requests))
        return super().choose(requests)


def test_the_wall_time_estimate_counts_rows_where_the_model_answered_them(tmp_path: Path) -> None:
    """Answers fetched ahead in one batch are charged over many later trials: counted by charges, the rate read
    thousands of calls/s (7650.1 on agnews under serve generate). Counted where the model answered, it is the
    model's."""
    config = oracle_config(tmp_path, budget=600)
    console = Console(file=io.StringIO(), width=200)
    run_study(config, backend=SlowRows(oracle_for(config).inner), console=console, progress=True)
    rate = float(console.file.getvalue().split(" model calls/s")[0].rsplit(" ", 1)[1])
    assert rate <= 60
