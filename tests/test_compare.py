"""compare on the synthetic oracle: matched budgets, per-run charging of shared-cache hits,
the report and its fairness checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prompttune.commands.compare import parse_options
from prompttune.comparing.fairness import ModelWatch
from prompttune.core.config import RunConfig
from prompttune.core.errors import BudgetExhausted, UserError
from prompttune.core.types import ScoreRequest
from prompttune.engine.comparison import CompareRequest, run_compare
from prompttune.engine.study import run_study
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import Evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.metered_cache import MeteredCache
from prompttune.search_spaces import default_space
from tests.support import oracle_config, oracle_for, task_of


def _evaluator(config: RunConfig, backend, cache, ledger: BudgetLedger) -> Evaluator:
    task = task_of(config)
    visible = {e.id: e for s in ("train", "dev") for e in task.splits[s]}
    return Evaluator(backend, visible, {e.id: e for e in task.splits["train"]}, cache, ledger)


def test_a_hit_on_another_runs_entry_costs_what_the_call_would_have(tmp_path: Path) -> None:
    config = oracle_config(tmp_path)
    backend, shared = oracle_for(config), ResultCache()
    spec = default_space(task_of(config)).default_candidate().spec
    dev = [e.id for e in task_of(config).splits["dev"]][:20]
    first = BudgetLedger(cap_calls=100)
    _evaluator(config, backend, MeteredCache(shared), first).evaluate(spec, dev)
    second = BudgetLedger(cap_calls=100)
    evaluator = _evaluator(config, backend, MeteredCache(shared), second)
    evaluator.evaluate(spec, dev)
    assert (second.calls, second.tokens) == (first.calls, first.tokens) == (20, first.tokens)
    assert backend.calls == 20  # the model was not asked again
    evaluator.evaluate(spec, dev)  # its own entry now: free, as with a private cache
    assert second.calls == 20 and dict(second.calls_by_kind) == {"score (shared cache)": 20}


def test_a_refused_request_charges_none_of_its_shared_hits(tmp_path: Path) -> None:
    config = oracle_config(tmp_path)
    backend, shared = oracle_for(config), ResultCache()
    spec = default_space(task_of(config)).default_candidate().spec
    dev = [e.id for e in task_of(config).splits["dev"]]
    first = BudgetLedger()
    _evaluator(config, backend, MeteredCache(shared), first).evaluate(spec, dev[:20])
    capped = BudgetLedger(cap_calls=25)
    evaluator = _evaluator(config, backend, MeteredCache(shared), capped)
    with pytest.raises(BudgetExhausted):
        evaluator.evaluate(spec, dev[:30])  # 20 shared hits + 10 misses > 25
    assert capped.calls == 0
    evaluator.evaluate(spec, dev[:25])
    assert capped.calls == 25


def test_compare_two_optimizers_two_seeds_matched_budgets(tmp_path: Path) -> None:
    config = oracle_config(tmp_path)
    backend = oracle_for(config)
    result = run_compare(CompareRequest(config, ["random", "sh"], [0, 1], {"sh": {"eta": 3}}, backend=backend))
    assert [(r.arm, r.seed) for r in result.runs] == [("random", 0), ("random", 1), ("sh", 0), ("sh", 1)]
    assert all(r.search.calls <= config.budget for r in result.runs)
    assert all(check.ok for check in result.checks), [c for c in result.checks if not c.ok]
    # Every later run found the baseline's dev scores in the shared cache, and paid for them.
    assert all(r.foreign_calls > 0 for r in result.runs[1:])
    # A run inside the comparison spent exactly what it spends alone with a private cache.
    sh1 = result.runs[3]
    solo = run_study(config.model_copy(update={"optimizer": "sh", "seed": 1, "optimizer_options": {"eta": 3},
                                                      "runs_dir": str(tmp_path / "solo")}),
                            backend=oracle_for(config))
    assert (solo.search_ledger.calls, solo.search_ledger.tokens) == (sh1.search.calls, sh1.search.tokens)
    assert solo.shipped.spec == sh1.best
    report = (result.run_dir / "report.md").read_text()
    for needle in ("## Held-out test accuracy", "Benjamini–Hochberg", "## Leading arms head to head",
                   "![anytime curves](anytime.png)", "## Fairness", "no search-time model request quoted"):
        assert needle in report
    assert (result.run_dir / "anytime.png").stat().st_size > 10_000
    page = (result.run_dir / "report.html").read_text()
    for needle in ("<h2>Per seed", "<h2>Anytime curves", "<h2>Fairness checks", "data:image/png;base64,"):
        assert needle in page
    assert all((r.run_dir / "report.html").is_file() for r in result.runs)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert [a["arm"] for a in summary["arms"]] == ["random", "sh"]
    assert all(len(r.test_correct) == config.test_size for r in result.runs)


def test_the_watch_flags_a_prompt_that_quotes_a_test_example(tmp_path: Path) -> None:
    config = oracle_config(tmp_path)
    task = task_of(config)
    watch = ModelWatch(oracle_for(config), task)
    test_text, train_text = task.splits["test"][0].fields["text"], task.splits["train"][0].fields["text"]
    watch.score([ScoreRequest(f"Input: {train_text}\nAnswer:", ("red",)),
                 ScoreRequest(f"Input: {test_text}\nAnswer:", ("red",))])
    assert watch.served(0, 1).leaks == 0 and watch.served(0, 2).leaks == 1 and watch.served(1, 2).requests == 1


def test_options_are_grouped_by_optimizer() -> None:
    assert parse_options(["sh.eta=3", "dspy-mipro.num_trials=8", "cople.synonyms=none"]) == {
        "sh": {"eta": 3}, "cople": {"synonyms": "none"}, "dspy-mipro": {"num_trials": 8}}


def test_jobs_run_arm_seeds_in_worker_processes_with_the_results_of_one_at_a_time(tmp_path: Path) -> None:
    config = oracle_config(tmp_path)
    one = run_compare(CompareRequest(config, ["random", "sh"], [0, 1], {}, backend=oracle_for(config)))
    two = run_compare(CompareRequest(config, ["random", "sh"], [0, 1], {}, backend_factory=oracle_for, jobs=2))

    def outcome(comparison) -> list[tuple]:
        return [(r.arm, r.seed, r.best, r.raw, r.search.calls, r.search.tokens, r.confirmation, r.test_correct)
                for r in comparison.runs]
    assert outcome(two) == outcome(one)
    assert all(check.status != "failed" for check in two.checks), [c for c in two.checks if not c.ok]
    assert len({r.run_dir.parent for r in two.runs}) == 1 and all((r.run_dir / "arm.json").is_file() for r in two.runs)
    with pytest.raises(UserError, match="pass backend_factory, not a backend"):
        run_compare(CompareRequest(config, ["random"], [0], {}, backend=oracle_for(config), jobs=2))
