"""The one verdict protocol: the driver decides challenges per sweep, the test split decides what
ships, and what ships (files, export, API, compare) is the verdict — checked on the synthetic oracle."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pytest

from prompttune.cli import main
from prompttune.core.types import Record
from prompttune.engine import study
from prompttune.engine.study import run_study
from prompttune.export.writers import load_winner
from prompttune.optimizers import OPTIMIZERS
from prompttune.optimizers.registry import STRATEGIES, Reach, optimizer_entry
from prompttune.optimizers.strategy_contract import Challenge, IncumbentSearch, TrialRequest, spec_candidate
from prompttune.reports.optimize_report import confirmable_gain
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.testing import run_oracle
from tests.support import oracle_config, oracle_for


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_what_ships_is_the_verdict(tmp_path: Path, name: str) -> None:
    config = oracle_config(tmp_path, optimizer=name)
    result = run_study(config, backend=oracle_for(config))
    verdict, run_dir = result.verdict, result.run_dir
    shipped = json.loads((run_dir / "best_prompt.json").read_text())
    assert shipped["candidate_id"] == verdict.shipped.id == result.shipped.id
    assert load_winner(run_dir)[0] == verdict.shipped.spec  # what `prompttune export` reads
    assert json.loads((run_dir / "dev_winner.json").read_text())["candidate_id"] == verdict.dev_winner.id
    leaders = [json.loads(line) for line in (run_dir / "leaders.jsonl").read_text().splitlines()]
    assert PromptSpec.from_dict(leaders[-1]["spec"]) == verdict.dev_winner.spec  # the last dev pick is the one tested
    spends = [row["calls"] for row in leaders]
    assert spends == sorted(spends) and spends[-1] <= result.search_ledger.calls
    if verdict.confirmed is None:
        assert shipped["is_baseline"] and verdict.shipped.id == result.baseline.id
        assert result.confirmation.gain == 0.0
    else:
        assert verdict.confirmed.confirmation.comparison.p_one_sided < config.alpha
        assert verdict.shipped.id == verdict.dev_winner.id
    assert verdict.summary() in (run_dir / "report.md").read_text()


def test_an_unconfirmed_dev_winner_is_kept_beside_the_baseline_that_ships(tmp_path: Path) -> None:
    """Every prompt equally good: random search still has a dev winner, but the baseline ships (under `logprobs`,
    where the oracle's label scores differ by prompt; its constrained answers of equal prompts tie)."""
    config = oracle_config(tmp_path, serve="logprobs")
    backend = oracle_for(config)
    backend.inner.accuracy_of = lambda text: 0.6
    result = run_study(config, backend=backend)
    assert result.verdict.dev_winner.id != result.baseline.id
    assert result.verdict.confirmed is None and result.shipped.id == result.baseline.id
    assert "the baseline ships" in (result.run_dir / "report.md").read_text()
    assert load_winner(result.run_dir)[0] == result.baseline.spec
    assert (result.run_dir / "dev_winner.txt").read_text() != (result.run_dir / "best_prompt.txt").read_text()


def test_confirm_top_k_tests_k_candidates_with_holm() -> None:
    run = run_oracle("random", 3000, confirm_top=3)
    tested = run.verdict.tested
    assert 1 <= len(tested) <= 3
    top = [c.id for c in run.outcome.ranking[:3] if c.id != run.optimizer.baseline.id]
    assert [t.candidate.id for t in tested] == top
    assert all(t.p_adjusted >= t.confirmation.comparison.p_one_sided for t in tested)
    if run.verdict.confirmed:
        assert run.verdict.shipped.id == next(t.candidate.id for t in tested if t.confirmed)


class _ThreeChallenges(IncumbentSearch):
    """Test double: asks three challenges in a sweep it declared as two."""

    name = "three-challenges"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sweep = self.open_sweep(2)
        self.asked = 0

    def ask(self) -> TrialRequest | Challenge | None:
        self.asked += 1
        variant = self.baseline.spec.with_updates(instruction=f"Variant {self.asked}: {{labels}}.")
        return self.challenge(spec_candidate(variant, "test"), self.sweep)

    def tell(self, request: TrialRequest, records: list[Record]) -> dict[str, Any]:
        return {}


def test_a_sweep_cannot_run_more_challenges_than_it_declared(monkeypatch) -> None:
    monkeypatch.setitem(STRATEGIES, "three-challenges", optimizer_entry(_ThreeChallenges, Reach(lists=True)))
    with pytest.raises(RuntimeError, match="planned 2 challenges"):
        run_oracle("three-challenges", 3000, accuracy=lambda text: 0.6)


def test_each_challenge_of_a_sweep_gets_its_share_of_dev_alpha() -> None:
    run = run_oracle("cople", 3000, options={"synonyms": ""}, accuracy=lambda text: 0.6,
                     proposals=lambda text: "shade, tint, hue")
    decided = [t for t in run.storage.load() if "threshold" in t]
    assert decided and run.outcome.sweeps >= 1 and max(t["sweep_size"] for t in decided) > 1
    last_looks = [t for t in decided if t["paired_n"] == 300]
    # O'Brien-Fleming spending keeps most of a challenge's alpha / (sweep size) for its last look.
    assert last_looks and all(0.5 * 0.10 / t["sweep_size"] <= t["threshold"] <= 0.10 / t["sweep_size"]
                              for t in last_looks)


def test_a_run_states_the_gain_its_test_split_confirms_first_and_in_both_reports(tmp_path: Path, capsys,
                                                                                 monkeypatch) -> None:
    monkeypatch.setattr(study, "build_backend", oracle_for)
    config = oracle_config(tmp_path, optimizer="sh")
    assert main(["optimize", "--task", config.task, "--optimizer", "sh", "--budget", str(config.budget),
                 "--train-size", "60", "--dev-size", "60", "--test-size", "90", "--runs-dir", config.runs_dir]) == 0
    before_search = " ".join(capsys.readouterr().err.split("held-out verdict on")[0].split())  # unwrapped
    statement, warning = confirmable_gain(90, 0.05)  # before the run: no baseline accuracy
    assert f"{statement} warning: {warning}" in before_search
    run_dir = next(path for path in Path(config.runs_dir).iterdir() if path.is_dir())
    facts = json.loads((run_dir / "verdict.json").read_text())["verdict"]
    statement, warning = confirmable_gain(90, 0.05, 1, facts["baseline_only"]["baseline_accuracy"])
    assert statement.startswith("the test split of 90 examples confirms a gain of ≥ ") and warning
    report, page = (run_dir / "report.md").read_text(), (run_dir / "report.html").read_text()
    assert f"The{statement[3:]}.\n\n**Warning: {warning}.**" in report
    assert f"The{html.escape(statement[3:], quote=False)}." in page and html.escape(warning, quote=False) in page
