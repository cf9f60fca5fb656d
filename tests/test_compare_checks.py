"""compare's fairness checks can fail: each is broken on purpose here (an arm that asks the model
behind its ledger, a different baseline, different test examples, an arm that stops early, a
stray demo) and must report it; plus the spend per arm, the hard token cap and `--match tokens`."""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from rich.console import Console

from prompttune.backends.backend import Backend
from prompttune.cli import main
from prompttune.comparing.coverage import coverage_check
from prompttune.comparing.fairness import ModelWatch, Spend, caps_of, fairness_checks
from prompttune.core.config import RunConfig
from prompttune.core.errors import BudgetExhausted
from prompttune.core.types import GenerateRequest
from prompttune.engine import study
from prompttune.engine.compare_steps import pick_at
from prompttune.engine.comparison import CompareRequest, run_compare
from prompttune.optimizers.random_search import RandomSearch
from prompttune.reports.compare_report import spend_cells
from prompttune.results.compare import Check, CompareResult
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import Evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.metered_cache import MeteredCache
from prompttune.search_spaces import default_space
from prompttune.testing import colours_task_file
from tests.support import CountingBackend, oracle_config, oracle_for, task_of


def _check(comparison: CompareResult, starts: str) -> Check:
    return next(c for c in comparison.checks if c.claim.startswith(starts))


def _failed(comparison: CompareResult) -> list[str]:
    """The claims that failed, cut to the prefixes below where one matches."""
    known = (SERVED, CALL_CAP, BASELINE, TEST_IDS, RESCORED)
    return [next((k for k in known if c.claim.startswith(k)), c.claim) for c in comparison.checks
            if c.status == "failed"]


SERVED = "every request and token the model served"
CALL_CAP = "no arm's search spent more than 300 calls"
BASELINE = "at each seed, every run was confirmed against the same baseline prompt"
TEST_IDS = "at each seed, every run's verdict scored the same test examples"
RESCORED = "re-scoring the winners"


def test_an_arm_that_asks_the_model_behind_its_ledger_fails_the_served_and_cap_checks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tell = RandomSearch.tell

    def tell_and_peek(self: RandomSearch, request, records):
        self.proposer.backend.generate([GenerateRequest("Which colour comes next?", 8)])  # charged to no ledger
        return tell(self, request, records)

    monkeypatch.setattr(RandomSearch, "tell", tell_and_peek)
    config = oracle_config(tmp_path)
    result = run_compare(CompareRequest(config, ["random", "sh"], [0], {}, backend=oracle_for(config)))
    served, cap = _check(result, SERVED), _check(result, CALL_CAP)
    random_run = result.runs[0]
    assert random_run.search.calls == 300 and random_run.served.requests == 305  # five candidates, five peeks
    assert served.status == cap.status == "failed"
    assert "random s0: the model served 305 requests" in served.detail and "sh s0" not in served.detail
    assert cap.detail == "random s0: 305"
    assert _failed(result) == [SERVED, CALL_CAP]


def test_an_arm_with_another_baseline_prompt_fails_the_baseline_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    load_space = study.load_space

    def sh_shows_options(config: RunConfig, task):
        space = load_space(config, task)
        if config.optimizer != "sh":
            return space
        return replace(space, base=space.base.with_updates(options="Options: red, green or blue."))

    monkeypatch.setattr(study, "load_space", sh_shows_options)
    config = oracle_config(tmp_path)
    result = run_compare(CompareRequest(config, ["random", "sh"], [0], {}, backend=oracle_for(config)))
    check = _check(result, BASELINE)
    assert check.status == "failed" and check.detail.count("sha256") == 2
    # Another base spec is another space too, which the coverage check also catches.
    assert set(_failed(result)) == {BASELINE, coverage_check(result.runs, {0: result.coverage}).claim}


def test_an_arm_judged_on_other_test_examples_fails_the_test_id_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    load_run_task = study.load_run_task

    def sh_loses_a_test_example(config: RunConfig):
        task = load_run_task(config)
        if config.optimizer != "sh":
            return task
        return replace(task, splits={**task.splits, "test": task.splits["test"][1:]})

    monkeypatch.setattr(study, "load_run_task", sh_loses_a_test_example)
    config = oracle_config(tmp_path)
    result = run_compare(CompareRequest(config, ["random", "sh"], [0], {}, backend=oracle_for(config)))
    check = _check(result, TEST_IDS)
    assert check.status == "failed" and "random s0" in check.detail and "sh s0" in check.detail
    assert [len(r.test_ids) for r in result.runs] == [config.test_size, config.test_size - 1]
    # The pairwise re-scoring, on the comparison's own test split, had to ask the model as well.
    assert _failed(result) == [TEST_IDS, RESCORED]


@pytest.fixture(scope="module")
def random_stops_early_at_seed_1(tmp_path_factory: pytest.TempPathFactory) -> tuple[CompareResult, str]:
    """random at seeds 0 and 1, where seed 1 stops after the baseline; sh at seed 0 and 1."""
    tmp_path = tmp_path_factory.mktemp("early")
    ask = RandomSearch.ask
    console = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RandomSearch, "ask", lambda self: None if self.context.seed == 1 and self._scored else ask(self))
        config = oracle_config(tmp_path)
        result = run_compare(CompareRequest(config, ["random", "sh"], [0, 1], {}, backend=oracle_for(config),
                                            console=Console(file=console, width=250), progress=True,
                                            allow_underspend=True))
    return result, console.getvalue()


def test_an_arm_that_stops_early_fails_the_matched_budget_check_unless_allowed(
        random_stops_early_at_seed_1, tmp_path: Path) -> None:
    result, console = random_stops_early_at_seed_1  # with --allow-underspend: a warning
    check = _check(result, "every arm spent at least 90%")
    assert check.status == "warning" and check.detail == "random s1: 60/300 calls (20%)"
    assert not _failed(result)  # a warning fails nothing
    assert "⚠ WARNING every arm spent at least 90% of its 300-calls cap (random s1: 60/300 calls (20%))" \
        in (result.run_dir / "report.md").read_text()
    assert "⚠ WARNING every arm spent at least 90% of its 300-calls cap (random s1: 60/300 calls (20%))" in console
    page = (result.run_dir / "report.html").read_text()
    assert '<li class="warn">⚠ WARNING every arm spent at least 90%' in page
    ask = RandomSearch.ask
    with pytest.MonkeyPatch.context() as patch:  # without it, the same comparison fails that check
        patch.setattr(RandomSearch, "ask", lambda self: None if self._scored else ask(self))
        config = oracle_config(tmp_path)
        strict = run_compare(CompareRequest(config, ["random", "sh"], [0], {}, backend=oracle_for(config)))
    assert _check(strict, "every arm spent at least 90%").status == "failed"


def test_the_report_shows_mean_and_max_spend_per_arm(random_stops_early_at_seed_1) -> None:
    result, console = random_stops_early_at_seed_1
    random_runs = [r for r in result.runs if r.arm == "random"]
    spend = Spend.of(random_runs)
    assert (spend.calls_mean, spend.calls_max) == (180, 300)
    assert spend.tokens_max == max(r.search.tokens for r in random_runs) > spend.tokens_mean
    cells = spend_cells(asdict(spend))
    assert cells[0] == "180 / 300"
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["arms"][0]["spend"] == asdict(spend)
    assert f"| {cells[0]} | {cells[1]} |" in (result.run_dir / "report.md").read_text()
    assert f"<td class=num>{cells[0]}</td><td class=num>{cells[1]}</td>" in (result.run_dir / "report.html").read_text()
    assert all(cell in console for cell in cells)


def test_a_demo_from_outside_train_fails_the_demo_check(random_stops_early_at_seed_1, tmp_path: Path) -> None:
    result, _ = random_stops_early_at_seed_1
    task = task_of(result.config)  # seed 0's draw (split seed 0); seed 1 draws with split seed 1
    clean = _check(result, "every demo").detail
    assert clean == "0 distinct demo ids in the trials.jsonl and best_prompt.json of 0 of 4 runs (the others used no demos)"
    stray = tmp_path / "stray"
    shutil.copytree(result.runs[0].run_dir, stray)
    with open(stray / "trials.jsonl", "a") as log:
        log.write(json.dumps({"demo_ids": [task.splits["dev"][0].id]}) + "\n")
    runs = [replace(result.runs[0], run_dir=stray), *result.runs[1:]]
    watch = ModelWatch(oracle_for(result.config), task)
    check = next(c for c in fairness_checks({0: task, 1: task_of(result.config.model_copy(update={"split_seed": 1}))}, runs,
                                         result.caps, 0, watch) if c.claim.startswith("every demo"))
    assert check.status == "failed" and check.detail == "random s0"


def test_a_token_cap_refuses_the_request_that_would_pass_it_before_the_model_sees_it(tmp_path: Path) -> None:
    config = oracle_config(tmp_path)
    backend, task = oracle_for(config), task_of(config)
    spec = default_space(task).default_candidate().spec
    dev = [e.id for e in task.splits["dev"]]
    visible = {e.id: e for s in ("train", "dev") for e in task.splits[s]}

    def evaluator(ledger: BudgetLedger, cache) -> Evaluator:
        return Evaluator(backend, visible, {e.id: e for e in task.splits["train"]}, cache, ledger)

    probe = BudgetLedger()
    evaluator(probe, ResultCache()).evaluate(spec, dev[:10])
    capped = BudgetLedger(cap_tokens=probe.tokens + 5)  # ten more examples cost far more than 5 tokens
    shared = ResultCache()
    capped_evaluator = evaluator(capped, MeteredCache(shared))
    capped_evaluator.evaluate(spec, dev[:10])
    assert (capped.calls, capped.tokens, backend.calls) == (10, probe.tokens, 20)
    with pytest.raises(BudgetExhausted, match="token cap"):
        capped_evaluator.evaluate(spec, dev[10:20])
    assert (capped.calls, capped.tokens, backend.calls) == (10, probe.tokens, 20)
    # Another run's entries are refused as well when their recorded tokens would pass the cap.
    other = BudgetLedger(cap_tokens=probe.tokens - 1)
    with pytest.raises(BudgetExhausted, match="token cap"):
        evaluator(other, MeteredCache(shared)).evaluate(spec, dev[:10])
    assert (other.calls, other.tokens, backend.calls) == (0, 0, 20)


def test_match_tokens_caps_and_checks_tokens(tmp_path: Path) -> None:
    config = oracle_config(tmp_path, budget_tokens=4000)
    result = run_compare(CompareRequest(config, ["random", "sh"], [0], {}, backend=oracle_for(config), match="tokens",
                                        allow_underspend=True))
    assert [(cap.unit, cap.limit) for cap in result.caps] == [("tokens", 4000), ("calls", 300)]
    assert all(r.search.tokens <= 4000 and r.search.calls < 300 for r in result.runs)  # tokens bind, not calls
    assert all(r.stopped_by_budget for r in result.runs)
    cap = _check(result, "no arm's search spent more than 4000 tokens")
    assert cap.ok and cap.detail == f"max {max(r.search.tokens for r in result.runs)} tokens"
    full = _check(result, "every arm spent at least 90% of its 4000-tokens cap")
    least = min(result.runs, key=lambda r: r.search.tokens)
    assert f"{least.arm} s0: {least.search.tokens}/4000 tokens" in full.detail
    assert not _failed(result)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["caps"][0] == {"unit": "tokens", "limit": 4000}
    assert "· tokens-matched, cap 4000 tokens ·" in (result.run_dir / "report.md").read_text().splitlines()[0]


def test_caps_put_the_matched_one_first() -> None:
    assert [c.unit for c in caps_of("calls", 300, 4000)] == ["calls", "tokens"]
    assert [c.unit for c in caps_of("calls", 300, None)] == ["calls"]
    assert [c.unit for c in caps_of("tokens", 300, 4000)] == ["tokens", "calls"]


class BoundsByBytes(CountingBackend):
    """A backend without a tokenizer (`--backend openai` without `--tokenizer`): it bounds a text's
    tokens by its bytes, several times what the model then reports."""

    count_tokens = Backend.count_tokens
    token_bounds = Backend.token_bounds


def test_match_tokens_holds_on_a_backend_that_bounds_tokens_by_bytes(tmp_path: Path) -> None:
    config = oracle_config(tmp_path, budget_tokens=4000)
    loose = run_compare(CompareRequest(config, ["random", "sh"], [0], {}, backend=BoundsByBytes(oracle_for(config)),
                                       match="tokens", allow_underspend=True))
    exact = run_compare(CompareRequest(config, ["random", "sh"], [0], {}, backend=oracle_for(config), match="tokens",
                                       allow_underspend=True))
    assert all(r.search.tokens <= 4000 and r.stopped_by_budget for r in loose.runs)
    assert not _failed(loose)  # served equals charged, tokens included, and the cap holds
    # The loose reserve refuses requests the exact one lets run: the arms stop further short of the cap.
    assert all(b.search.tokens < e.search.tokens for b, e in zip(loose.runs, exact.runs))


def test_match_tokens_without_a_token_cap_is_one_line_and_exit_code_2(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = main(["compare", "--task", str(colours_task_file(tmp_path)), "--runs-dir", str(tmp_path / "runs"),
                 "--match", "tokens"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == "error: --match tokens needs --budget-tokens: the token cap every arm is matched on"
    assert not (tmp_path / "runs").exists()


def test_accuracy_at_equal_spend_tests_each_arms_pick_at_the_smallest_spend(random_stops_early_at_seed_1) -> None:
    result, _ = random_stops_early_at_seed_1
    e = result.equal_spend
    assert (e.unit, e.spend) == ("calls", 60)  # random s1 stopped after the baseline's 60 calls
    assert set(e.accuracy) == {"random", "sh"} and all(set(seeds) == {0, 1} for seeds in e.accuracy.values())
    stopped = next(r for r in result.runs if (r.arm, r.seed) == ("random", 1))
    assert e.accuracy["random"][1] == stopped.raw_confirmation.best_accuracy  # its pick at 60 calls is its last
    for run in result.runs:  # a pick at 60 calls is a leader the run had by then, or the baseline
        pick = pick_at(run, 60, "calls")
        assert pick == run.baseline or any(spec == pick and calls <= 60 for calls, _, spec in run.leaders)
    assert pick_at(replace(stopped, leaders=[(10, 0, stopped.raw), (90, 0, stopped.baseline)]), 60, "calls") == stopped.raw
    assert pick_at(replace(stopped, leaders=[(90, 0, stopped.raw)]), 60, "calls") == stopped.baseline
    report = (result.run_dir / "report.md").read_text()
    assert "## Accuracy at equal spend" in report and "once it had spent 60 calls" in report
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["equal_spend"]["spend"] == 60 and len(summary["equal_spend"]["arms"]) == 2
    assert "<h2>Accuracy at equal spend" in (result.run_dir / "report.html").read_text()
