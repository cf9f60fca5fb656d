"""Every optimizer on the synthetic oracle: finds the known best, never passes the cap, never sees test."""

from __future__ import annotations

import sys

import pytest

from prompttune.optimizers import OPTIMIZERS
from prompttune.tasks.task import SplitSizes
from prompttune.testing import critique, oracle_accuracy, run_oracle

BEST_ACCURACY = 0.9


def _true_accuracy(run) -> float:
    spec = run.outcome.leader.spec
    return oracle_accuracy(spec.instruction.replace("{labels}", "red, green, blue") + spec.output_template)


@pytest.mark.parametrize("name,budget", [("random", 6000), ("sh", 6000), ("spread", 4000)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_optimizer_finds_a_near_best_candidate_within_budget(name: str, budget: int, seed: int) -> None:
    run = run_oracle(name, budget, seed=seed)
    assert run.ledger.calls <= budget
    assert _true_accuracy(run) >= BEST_ACCURACY - 0.15, run.outcome.leader.spec
    dev_ids = {e.id for e in run.task.splits["dev"]}
    train_ids = {e.id for e in run.task.splits["train"]}
    test_ids = {e.id for e in run.task.splits["test"]}
    assert not test_ids & (dev_ids | train_ids)


@pytest.mark.parametrize("name", ["random", "sh", "spread", "bfrs"])
def test_budget_cap_is_never_exceeded(name: str) -> None:
    run = run_oracle(name, 730)
    assert run.ledger.calls <= 730
    assert run.storage.load()[-1]["budget_spent"] == run.ledger.calls


def test_successive_halving_reproduces_the_seed_schedule() -> None:
    run = run_oracle("sh", 60_000, sizes=SplitSizes(30, 800, 30), options={"schedule": "seed"})
    rounds = [t for t in run.storage.load() if t["purpose"].startswith("round")]
    assert sum(t["n"] for t in rounds) == 1440 * 20 + 360 * 40 + 90 * 80 + 22 * 160 + 5 * 500 == 56_420
    assert "7.8% of the grid-equivalent cost" in run.outcome.notes[0]
    assert _true_accuracy(run) >= BEST_ACCURACY - 0.05


@pytest.mark.parametrize("baseline_accuracy", [0.9, 0.3])
def test_successive_halving_spends_its_budget_whether_or_not_the_baseline_survives(baseline_accuracy: float) -> None:
    """The auto schedule keeps the baseline's top-up in reserve; a baseline that survives the first
    round frees that reserve for one more survivor, so the spend is the same either way (≥ 90%,
    the matched-budget bar of `compare`)."""
    def accuracy(text: str) -> float:  # the space's first values make the baseline; the others score ≤ 0.54
        baseline = text.startswith("Name the colour.\nInput: ") and text.rstrip().endswith("\nAnswer:")
        return baseline_accuracy if baseline else oracle_accuracy(text) * 0.6
    run = run_oracle("sh", 2000, sizes=SplitSizes(200, 300, 50), accuracy=accuracy)
    last_round = run.optimizer.ranked
    survived = any(c.id == run.optimizer.baseline.id for c in last_round)
    assert survived == (baseline_accuracy > 0.5)
    assert len(last_round) == 5 + survived
    assert run.optimizer.schedule == [(16, 20), (5, 280)]
    assert 1800 <= run.ledger.calls <= 2000


def test_equal_candidates_rarely_ship_while_the_dev_winner_is_noise() -> None:
    """A/A: with identical true accuracy the dev leader is almost never the baseline (selection
    picks noise), but the held-out verdict confirms it in about α of runs, and then only it ships."""
    confirmed = leader_not_baseline = 0
    for seed in range(20):
        run = run_oracle("random", 1500, seed=seed, accuracy=lambda text: 0.7)
        leader_not_baseline += run.outcome.leader.id != run.optimizer.baseline.id
        confirmed += run.verdict.confirmed is not None
        assert run.verdict.shipped.id in (run.optimizer.baseline.id, run.outcome.leader.id)
        if run.verdict.confirmed is None:
            assert run.verdict.shipped.id == run.optimizer.baseline.id
    assert confirmed <= 3 and leader_not_baseline >= 12  # 4 of the 5 prompts scored are not the baseline


def test_spread_reports_best_worst_and_spread() -> None:
    run = run_oracle("spread", 4000, options={"formats": 12})
    summary = run.optimizer.spread_summary()
    assert summary["best_accuracy"] > summary["worst_accuracy"]
    assert summary["spread"] == pytest.approx(summary["best_accuracy"] - summary["worst_accuracy"])
    assert "spread" in run.outcome.notes[0]


@pytest.mark.parametrize("seed", [1, 2])
def test_spread_scores_the_baseline_on_all_of_the_leaders_examples(seed: int) -> None:
    """The final paired verdict then uses every example the leader saw, not the baseline's few pulls."""
    run = run_oracle("spread", 1500, seed=seed, options={"formats": 12})
    optimizer = run.optimizer
    leader = optimizer.memo[optimizer.spread_summary()["best"].id]
    assert len(leader) > optimizer.options.batch and set(leader) <= set(optimizer.memo[optimizer.baseline.id])


def test_bfrs_builds_demo_programs_from_train_only() -> None:
    run = run_oracle("bfrs", 4000, accuracy=lambda text: 0.9 if text.count("item ") >= 3 else 0.5)
    train_ids = {e.id for e in run.task.splits["train"]}
    programs = run.optimizer.programs
    assert len(programs) >= 4 and all(set(p.spec.demo_ids) <= train_ids for p in programs)
    assert len(run.outcome.leader.spec.demo_ids) >= 2


def _scripted_proposer(good: str):
    """Proposals for the oracle: critiques, one good and one invalid instruction in turn."""
    turn = [0]

    def propose(text: str) -> str:
        if "In one sentence" in text or "Describe in one sentence" in text:
            return critique(text)
        turn[0] += 1
        return [good, "ok", "Say which colour it is: {labels}."][turn[0] % 3]
    return propose


@pytest.mark.parametrize("seed", [0, 1])
def test_mipro_finds_the_good_instruction_and_format(seed: int) -> None:
    run = run_oracle("mipro", 4000, seed=seed, proposals=_scripted_proposer("Pick the colour ({labels})."))
    assert run.ledger.calls <= 4000 and run.ledger.calls_by_kind["propose"] >= 3
    assert _true_accuracy(run) >= BEST_ACCURACY - 0.25
    assert "Pick the colour" in run.outcome.leader.spec.instruction


@pytest.mark.parametrize("seed", [0, 1])
def test_mipro_spends_what_its_trials_leave_on_more_full_evaluations(seed: int) -> None:
    """When the trials stop short of the cap (a minibatch plus a dev split no longer fits), the calls left
    fully evaluate the next candidates by minibatch score instead of going unspent (the matched-budget
    check of `compare` wants 90% of the cap)."""
    run = run_oracle("mipro", 2000, seed=seed, proposals=_scripted_proposer("Pick the colour ({labels})."))
    assert 0.9 * 2000 <= run.ledger.calls <= 2000
    assert len(run.optimizer.full_scores) >= 2


@pytest.mark.parametrize("seed", [0, 1])
def test_p2g_critiques_fp_and_fn_apart_and_accepts_a_real_gain(seed: int) -> None:
    run = run_oracle("p2g", 3000, seed=seed, proposals=_scripted_proposer("Pick the colour ({labels})."))
    assert run.ledger.calls <= 3000
    kinds = {c.split()[0] for c in run.optimizer.critiques}
    assert kinds <= {"FP", "FN"} and run.optimizer.critiques
    assert "Pick the colour" in run.outcome.leader.spec.instruction


def test_p2g_keeps_searching_after_a_barren_expansion() -> None:
    """The first expansion yields only unusable edits; the next minibatch is critiqued again."""
    edits = [0]

    def propose(text: str) -> str:
        if "In one sentence" in text:
            return critique(text)
        edits[0] += 1
        return "ok" if edits[0] <= 4 else "Pick the colour ({labels})."
    run = run_oracle("p2g", 3000, proposals=propose, options={"directions": 2, "edits": 2})
    assert run.optimizer.expansions >= 2 and edits[0] > 4
    assert "Pick the colour" in run.outcome.leader.spec.instruction


def test_proposals_are_checked_and_keep_the_label_set() -> None:
    from prompttune.optimizers.proposer import LABEL_CLAUSE, checked_instruction

    words = ["red", "green", "blue"]
    assert checked_instruction("ok", words) is None
    assert checked_instruction("Instruction: Name the colour: {labels}.", words) == "Name the colour: {labels}."
    assert checked_instruction("Is it red, green or blue?", words) == "Is it red, green or blue?"
    assert checked_instruction("Name the colour of the item.", words) == "Name the colour of the item." + LABEL_CLAUSE
    assert checked_instruction("word " * 200, words) is None


def test_p2g_error_directions_keep_fp_and_fn_separate() -> None:
    from prompttune.core.types import Record
    from prompttune.optimizers.p2g import error_directions

    def rec(gold: int, pred: int) -> Record:
        return Record("x", gold, pred, None, None, 1, 1, False)
    records = [rec(0, 1)] * 25 + [rec(2, 1)] * 5 + [rec(1, 0)] * 3
    directions = error_directions(records, 3, min_errors=20)
    assert [(d.kind, d.label, d.other, len(d.errors)) for d in directions] == [
        ("fp", 1, 0, 30), ("fn", 0, 1, 25)]


def test_cople_swaps_an_influential_word_through_the_accept_rule() -> None:
    """The oracle rewards 'Pick' over 'Name'; the space declares the slot's alternatives."""
    from prompttune.search_spaces.space import Dimension, SearchSpace
    from prompttune.testing import oracle_space

    base = oracle_space()
    space = SearchSpace("words", base.base.with_updates(instruction="{verb} the colour ({labels})."),
                        [Dimension("verb", ("Name", "Pick", "State"), "slot:verb", kind="word"),
                         Dimension("output", ("Answer: {}",), "output_template")])
    run = run_oracle("cople", 3000, space=space, options={"synonyms": ""},
                     accuracy=lambda text: 0.85 if "Pick the colour" in text else 0.55)
    assert run.outcome.leader.spec.instruction.startswith("Pick")
    assert run.ledger.calls <= 3000
    assert "nominal lexical space" in run.outcome.notes[0]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_strategy_module_opens_with_a_runnable_example(name: str) -> None:
    """pytest runs them as doctests (--doctest-modules over prompttune/optimizers, see pyproject.toml)."""
    doc = sys.modules[OPTIMIZERS[name].__module__].__doc__
    assert ">>> run = prompttune.optimize(" in doc and doc.count(">>> ") >= 5
