"""The driver places the baseline in every strategy's ranking by paired dev score: a prompt ranks
above the baseline only when it beat it on the same dev examples (the baseline wins ties), so the
dev winner handed to the verdict, the leader's dev figures and the anytime curve all use it."""

from __future__ import annotations

import re

import pytest

from prompttune.optimizers import OPTIMIZERS
from prompttune.tasks.task import SplitSizes
from prompttune.testing import error_rate_proposer, run_oracle, synthetic_task

SIZES = SplitSizes(200, 200, 60)
BUDGET = 1500
OPTIONS = {"cople": {"synonyms": ""}, "p2g": {"min_errors": 2}, "spread": {"formats": 12}}
# The oracle space's baseline prompt and nothing else: another instruction, field, output,
# separator or any demo breaks the match.
BASELINE_PROMPT = re.compile(r"Name the colour\.\nInput: ([^\n]*)\nAnswer:")


def _run(name: str, accuracy, budget: int = BUDGET, options: dict | None = None):
    return run_oracle(name, budget, sizes=SIZES, accuracy=accuracy, proposals=error_rate_proposer(),
                      options=options if options is not None else OPTIONS.get(name, {}))


def _paired_ids(run, candidate) -> list[str]:
    """The dev examples both the candidate and the baseline were scored on."""
    opt = run.optimizer
    return [i for i in opt.dev_ids_of(candidate) if i in opt.memo.get(opt.baseline.id, {})]


def _paired(run, candidate) -> tuple[float, float] | None:
    """(candidate, baseline) dev scores on their paired examples."""
    opt, ids = run.optimizer, _paired_ids(run, candidate)
    return (opt.score_on(candidate, ids), opt.score_on(opt.baseline, ids)) if ids else None


def _beats_baseline(run, candidate) -> bool:
    scores = _paired(run, candidate)
    return scores is not None and scores[0] > scores[1]


def _first_dev_texts(n: int) -> set[str]:
    """Texts of the first `n` dev examples, split as `run_oracle` splits them."""
    task = synthetic_task(n_per_class=max(200, sum(vars(SIZES).values()) // 3 + 1), sizes=SIZES)
    return {e.fields["text"] for e in task.splits["dev"][:n]}


def unlucky_baseline(first: int = 20):
    """The baseline prompt is wrong on the first `first` dev examples and right 90% of the time
    elsewhere; every other prompt is right half the time."""
    early = _first_dev_texts(first)

    def accuracy(text: str) -> float:
        if match := BASELINE_PROMPT.fullmatch(text):
            return 0.0 if match.group(1) in early else 0.9
        return 0.5
    return accuracy


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_baseline_better_than_every_other_prompt_leads(name: str) -> None:
    """Any change to the baseline prompt costs accuracy: whatever the strategy tried, the outcome's
    ranking holds the baseline, it leads, and nothing is sent to the test split."""
    run = _run(name, lambda text: 0.9 if BASELINE_PROMPT.fullmatch(text) else 0.3)
    outcome, baseline = run.outcome, run.optimizer.baseline
    ranked = [c.id for c in outcome.ranking]
    assert ranked.count(baseline.id) == 1 and len(run.optimizer.memo) > 1
    assert not any(_beats_baseline(run, c) for c in outcome.ranking)  # the premise: every other prompt is worse
    assert outcome.leader.id == baseline.id and outcome.leader_dev_score == outcome.baseline_dev_score
    assert run.verdict.tested == [] and run.verdict.shipped.id == baseline.id
    curve = [t["best_so_far"] for t in run.storage.load() if "best_so_far" in t]
    assert curve and min(curve) >= 0.6  # the baseline's level from its first dev score on, never a worse prompt's
    assert outcome.anytime[-1][1] == outcome.leader_dev_score


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_the_baseline_sits_where_its_paired_scores_put_it(name: str) -> None:
    """The baseline loses the first dev examples: strategies that rank on few examples may leave it
    out or below; the outcome still places it after exactly the prompts that beat it paired."""
    run = _run(name, unlucky_baseline())
    outcome, baseline = run.outcome, run.optimizer.baseline
    ranked = [c.id for c in outcome.ranking]
    assert ranked.count(baseline.id) == 1
    place = ranked.index(baseline.id)
    assert all(_beats_baseline(run, c) for c in outcome.ranking[:place])
    assert not any(_beats_baseline(run, c) for c in outcome.ranking[place + 1:])
    if outcome.leader.id != baseline.id:
        assert outcome.leader_dev_score > outcome.baseline_dev_score
        assert outcome.baseline_dev_n == outcome.leader_dev_n  # topped up on all the leader's examples


def test_sh_puts_back_the_baseline_its_first_round_dropped() -> None:
    """The reported case: sh (budget 1200, dev 200: 15 prompts × 20 examples, then 4 × 180) drops
    the baseline after 20 examples; its 4 survivors are worse on the full dev split, so the
    baseline, topped up on their 200 examples, leads and nothing is sent to the test split."""
    run = _run("sh", unlucky_baseline(20), budget=1200, options={})
    opt, outcome = run.optimizer, run.outcome
    assert opt.schedule == [(15, 20), (4, 180)]
    assert opt.baseline.id not in {c.id for c in opt.ranking()}  # sh's own ranking lost it
    survivors = opt.ranking()
    assert len(survivors) == 4 and all(len(_paired_ids(run, c)) == 200 for c in survivors)
    assert all(not _beats_baseline(run, c) for c in survivors)
    assert outcome.leader.id == opt.baseline.id and outcome.ranking[1:] == survivors
    assert outcome.leader_dev_n == outcome.baseline_dev_n == 200
    assert outcome.baseline_dev_score > max(opt.score_on(c, opt.dev_ids_of(c)) for c in survivors)
    assert run.verdict.dev_winner.id == opt.baseline.id and run.verdict.tested == []
    assert outcome.anytime[-1] == (run.ledger.calls, outcome.baseline_dev_score)  # the curve ends at the baseline
