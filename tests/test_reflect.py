"""The flagship optimizer (reflect) on test devices: calibration is raced and ships when it pays, the
dense margin score, the budget it fills, and what same-space comparisons hold it to."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import prompttune
from prompttune.comparing.coverage import plan_coverage
from prompttune.core.errors import UserError
from prompttune.core.types import Example, Record, ScoreRequest, ScoreResult
from prompttune.engine.comparison import CompareRequest, resume_compare, run_compare
from prompttune.optimizers.reflect.race import gold_probability, margin, race_score
from prompttune.optimizers.reflect.strategy import WRITTEN, ReflectiveRace
from prompttune.optimizers.strategy_contract import SearchContext, spec_candidate
from prompttune.reports.importance import MIN_FANOVA_CANDIDATES
from prompttune.scoring.prediction import debiased, label_bias
from prompttune.search_spaces import default_space
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.tasks import Task
from prompttune.testing import OracleProblem, SyntheticOracleBackend, is_better, scripted_proposals
from tests.support import oracle_config, oracle_for, task_of


class LabelBiasedOracle(SyntheticOracleBackend):
    """A TEST DEVICE: every prompt prefers the first label by 2 nats whatever the input, and the gold
    label by 1.5: raw scoring answers the first label always, calibrated scoring is always right."""

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]:
        results = []
        for r in requests:
            example = self._query(r.text)
            scores = [2.0 if i == 0 else 0.0 for i in range(len(r.continuations))]
            if example is not None:
                scores[example.label] += 1.5
            results.append(ScoreResult(tuple(s - 5.0 for s in scores), len(r.text.split()), len(r.continuations)))
        return results


def _biased_problem() -> OracleProblem:
    problem = OracleProblem.colours()
    examples = [ex for split in problem.task.splits.values() for ex in split]
    return OracleProblem(problem.task, problem.space, LabelBiasedOracle(examples, lambda text: 0.5))


def test_calibration_is_raced_and_ships_with_the_prompt_when_it_pays() -> None:
    problem = _biased_problem()
    run = prompttune.optimize(problem.task, optimizer="reflect", serve="logprobs", budget=600, space=problem.space,
                              backend=problem.backend, record=False)
    # Batch calibration by default: the offsets come from the raw prompt's answers, at no call.
    assert run.outcome.leader.spec.label_bias and run.shipped.spec.label_bias
    assert run.confirmation.best_accuracy == 1.0 and run.confirmation.baseline_accuracy == pytest.approx(1 / 3)
    assert run.ledger.calls_by_kind.get("content-free", 0) == 0
    contextual = prompttune.optimize(problem.task, optimizer="reflect", serve="logprobs", budget=600, space=problem.space,
                                     backend=problem.backend, record=False, options={"calibration": "contextual"})
    assert contextual.shipped.spec.calibrate and contextual.confirmation.best_accuracy == 1.0
    assert contextual.ledger.calls_by_kind["content-free"] > 0  # the probes are charged like any call
    off = prompttune.optimize(problem.task, optimizer="reflect", serve="logprobs", budget=600, space=problem.space,
                              backend=problem.backend, record=False, options={"calibration": "off"})
    assert not any(c.spec.calibrate or c.spec.label_bias for c in off.outcome.ranking)


def test_batch_calibration_subtracts_the_mean_label_scores_of_unlabelled_inputs() -> None:
    def record(scores: tuple[float, ...]) -> Record:
        return Record("x", 0, int(np.argmax(scores)), scores, None, 10, 1, False)

    # Every input leans to label 1 by 2 nats: the offsets carry that lean, and take it out.
    records = [record((0.5, 2.0)), record((1.0, 2.0)), record((-1.0, 2.0))]
    offsets = label_bias(records)
    assert offsets[1] - offsets[0] == pytest.approx(2.0, abs=0.2)
    assert [int(np.argmax(debiased(r.label_logprobs, offsets))) for r in records] == [0, 0, 1]


def test_the_margin_is_dense_and_bounded() -> None:
    def record(gold: int, pred: int | None, scores: tuple[float, ...] | None) -> Record:
        return Record("x", gold, pred, scores, None, 10, 1, False)
    sure, unsure = record(0, 0, (-0.1, -4.0, -5.0)), record(0, 0, (-1.0, -1.2, -3.0))
    assert margin(sure) == pytest.approx(3.9) and margin(unsure) == pytest.approx(0.2)  # both right, not alike
    assert margin(record(0, 1, (-50.0, -0.01, -9.0))) == -10.0  # clipped: one confident error cannot swamp a block
    assert margin(record(1, 1, None)) == 1.0 and margin(record(1, None, None)) == -1.0  # generated answers


def test_race_scores_rank_as_documented() -> None:
    """probability: dense and bounded (a confident error costs at most one example); tiebreak: the
    objective decides, and the margin only orders prompts the objective ties."""
    def record(gold: int, pred: int | None, scores: tuple[float, ...] | None) -> Record:
        return Record("x", gold, pred, scores, None, 10, 1, False)
    sure, unsure = record(0, 0, (-0.1, -4.0, -5.0)), record(0, 0, (-1.0, -1.2, -3.0))
    assert gold_probability(sure) > gold_probability(unsure) > 0.5
    assert 0.0 <= gold_probability(record(0, 1, (-50.0, -0.01, -9.0))) < 1e-20
    assert gold_probability(record(1, 1, None)) == 1.0 and gold_probability(record(1, None, None)) == 0.0

    def accuracy(records) -> float:
        return sum(r.correct for r in records) / len(records)
    wrong_confident = record(1, 0, (-0.01, -50.0, -50.0))
    right_barely, wrong_barely = record(0, 0, (-0.69, -0.70, -9.0)), record(1, 0, (-0.69, -0.70, -9.0))
    two_right = [sure, right_barely, wrong_confident]  # 2/3 right, one confident error
    one_right = [sure, wrong_barely, wrong_barely]  # 1/3 right, errors by a hair
    assert race_score("margin", two_right, accuracy) < race_score("margin", one_right, accuracy)  # margin flips it
    assert race_score("tiebreak", two_right, accuracy) > race_score("tiebreak", one_right, accuracy)
    assert race_score("objective", [sure], accuracy) == race_score("objective", [unsure], accuracy)
    assert race_score("tiebreak", [sure], accuracy) > race_score("tiebreak", [unsure], accuracy)
    assert race_score("probability", two_right, accuracy) == pytest.approx(
        np.mean([gold_probability(r) for r in two_right]))


def test_the_first_race_block_has_four_examples_per_class() -> None:
    problem = OracleProblem.colours()
    dev = [ex.id for ex in problem.task.splits["dev"]]
    six = SearchContext(problem.space, [], dev, n_classes=6, budget=1200)
    assert ReflectiveRace.first_block(six, ReflectiveRace.Options()) == 24
    # racing needs 80 calls, but a --budget of 80 would then fail the full evaluation of the 120-example dev split
    with pytest.raises(UserError, match="reflect: the budget 60 cannot race .*; raise --budget to at least 120$"):
        ReflectiveRace.check(SearchContext(problem.space, [], dev, n_classes=3, budget=60))


@pytest.mark.parametrize("budget", [400, 1000])
def test_it_spends_at_least_ninety_percent_of_the_cap_and_never_more(budget: int) -> None:
    problem = OracleProblem.colours(sizes=(60, 300, 60))
    run = prompttune.optimize(problem.task, optimizer="reflect", budget=budget, space=problem.space,
                              backend=problem.backend, record=False)
    assert 0.9 * budget <= run.ledger.calls <= budget
    assert "Pick the colour" in run.outcome.leader.spec.instruction


@pytest.mark.parametrize("budget, refit", [(800, False), (3000, True)])
def test_under_choice_the_plan_pays_for_twins_decoded_apart_and_the_final_race_runs_in_full(budget: int,
                                                                                            refit: bool) -> None:
    """Under `choice` a twin's offsets change what is decoded, so its answers take calls of their own: the screen,
    the evolve steps and the final race (finalists and their refit twins) are sized with them, and the final race
    ends within the cap instead of being cut by it; refits the calls left cannot pay for are not started."""
    problem = OracleProblem.colours(sizes=(60, 300, 60))
    run = prompttune.optimize(problem.task, optimizer="reflect", serve="choice", budget=budget, space=problem.space,
                              backend=problem.backend, record=False)
    reflect, purposes = run.strategy.optimizer, [t["purpose"] for t in run.trials.load()]
    assert not run.outcome.stopped_by_budget and 0.9 * budget <= run.ledger.calls <= budget
    assert reflect.final.final_ids and ("final (offsets refit)" in purposes) == refit
    assert reflect.final.refits <= set(reflect.final.finalists)


def test_once_the_race_block_covers_dev_the_final_reserve_goes_to_the_evolve_stage() -> None:
    """A TEST DEVICE where every sampled instruction is new, so the evolve stage never runs out of children:
    with a dev split of 60 the block covers it early, and the final race could spend nothing of its 40%
    reserve; the evolve stage spends it instead (before: 2,368 of 4,000 calls)."""
    problem = OracleProblem.colours(accuracy=lambda text: 0.85 if "(draw " in text else 0.55, sizes=(60, 60, 60))
    run = prompttune.optimize(problem.task, optimizer="reflect", serve="logprobs", budget=4000, space=problem.space,
                              backend=problem.backend, record=False, options={"sampled": 0.5})
    reflect = run.strategy.optimizer
    assert len(reflect.race.block) == len(reflect.final.final_ids) == 60
    assert 0.95 * 4000 <= run.ledger.calls <= 4000


def test_same_space_holds_what_the_space_does_not_declare_native_mode_lets_it_write_and_calibrate(tmp_path: Path) -> None:
    config = oracle_config(tmp_path)
    space = default_space(task_of(config)).bind(task_of(config).splits["train"])
    # The space lists instructions, so an instruction writer writes them; it declares no calibration.
    same = plan_coverage(["random", "reflect"], space, "same-space", {})["reflect"]
    assert same.options == {"calibration": "off"} and "calibrate" in same.held_fields
    assert same.sources == ("listed values", "written by a model")
    formats_only = replace(space, dimensions=[d for d in space.dimensions if d.target != "instruction"])
    held = plan_coverage(["random", "reflect"], formats_only, "same-space", {})["reflect"]
    assert held.options == {"write_instructions": False, "calibration": "off"}
    native = plan_coverage(["reflect"], space, "native", {})["reflect"]
    assert native.sources == ("listed values", "written by a model", "calibration")
    assert "calibrate" not in native.held_fields


def test_an_arm_added_to_a_comparison_runs_on_its_seeds_and_reads_the_others_back(tmp_path: Path) -> None:
    config = oracle_config(tmp_path)
    first = run_compare(CompareRequest(config, ["random"], [0, 1], {}, backend=oracle_for(config),
                                       allow_underspend=True))
    backend = oracle_for(config)
    with pytest.raises(UserError, match="would change what random search"):
        resume_compare(first.run_dir, backend=backend, add=["p2g"])  # same-space: p2g shares the instruction only
    with pytest.raises(UserError, match="random already in the comparison"):
        resume_compare(first.run_dir, backend=backend, add=["random"])
    both = resume_compare(first.run_dir, backend=backend, add=["sh"], add_options={"sh": {"eta": 3}})
    assert both.arms == ["random", "sh"] and [(r.arm, r.seed) for r in both.runs] == [
        ("random", 0), ("random", 1), ("sh", 0), ("sh", 1)]
    assert [(r.run_dir, r.best, r.confirmation) for r in both.runs[:2]] == [
        (r.run_dir, r.best, r.confirmation) for r in first.runs]  # read back, not run again
    assert {r.test_ids for r in both.runs if r.seed == 0} == {first.runs[0].test_ids}  # the seed's own draw
    assert "| sh |" in (first.run_dir / "report.md").read_text()


def test_the_staged_race_score_ranks_by_probability_until_the_final_race_then_by_the_objective() -> None:
    problem = OracleProblem.colours()
    kinds = {}
    for score in ("staged", "probability"):
        run = prompttune.optimize(problem.task, optimizer="reflect", budget=800, space=problem.space,
                                  backend=problem.backend, record=False, options={"race_score": score})
        kinds[score] = {kind for _, _, kind in run.strategy.optimizer.race.scores}
    assert kinds == {"staged": {"probability", "tiebreak"}, "probability": {"probability"}}


def test_instructions_sampled_at_temperature_one_are_raced_and_can_ship() -> None:
    """A TEST DEVICE where only sampled instructions help (the oracle marks a reply sampled at a
    temperature above 0 with its draw): reflect screens and moves with samples and ships one; with
    instruction writing off it cannot reach them."""
    problem = OracleProblem.colours(accuracy=lambda text: 0.85 if "(draw " in text else 0.55, sizes=(60, 300, 60))
    run = prompttune.optimize(problem.task, optimizer="reflect", budget=1000, space=problem.space,
                              backend=problem.backend, record=False, options={"sampled": 0.5})
    assert "(draw " in run.shipped.spec.instruction and run.confirmation.best_accuracy > 0.7
    sampled = [c for c in run.outcome.ranking if "(draw " in c.spec.instruction]
    assert len({c.spec.instruction for c in sampled}) >= 2  # distinct seeds, distinct samples
    off = prompttune.optimize(problem.task, optimizer="reflect", budget=1000, space=problem.space,
                              backend=problem.backend, record=False,
                              options={"sampled": 0.5, "write_instructions": False})
    assert not any("(draw " in c.spec.instruction for c in off.outcome.ranking)
    default = prompttune.optimize(problem.task, optimizer="reflect", budget=1000, space=problem.space,
                                  backend=problem.backend, record=False)  # sampling is off by default
    assert not any("(draw " in c.spec.instruction for c in default.outcome.ranking)


def test_each_screen_draw_with_demos_gets_its_own_class_balanced_set() -> None:
    problem = OracleProblem.colours()
    space = problem.space.with_demos(4)  # k in {0, 2, 4}: the grid's draws share one set of each size
    gold = {e.id: e.label for e in problem.task.splits["train"]}

    def demo_sets(options: dict) -> set[tuple[str, ...]]:
        run = prompttune.optimize(problem.task, optimizer="reflect", budget=2000, space=space,
                                  backend=problem.backend, record=False, options=options)
        return {c.spec.demo_ids for c in run.strategy.optimizer.pool.candidates.values() if c.spec.demo_ids}

    sets = demo_sets({"swap_demos": False, "demo_sets": True})  # no swaps: every set comes from the screen
    assert len(sets) >= 4
    assert all(len({gold[i] for i in demos}) == min(3, len(demos)) for demos in sets)  # every class in turn
    assert len(demo_sets({"swap_demos": False, "demo_sets": False})) <= 2  # off: the grid's one set per k


@pytest.mark.parametrize("budget, calibration, draws", [(600, "off", 8), (600, "batch", 4), (2000, "batch", 15)])
def test_the_screen_races_as_many_draws_as_its_share_pays_for(budget: int, calibration: str, draws: int) -> None:
    """3 classes: a first block of 20 dev examples. 600 calls, no twins: 8 draws fill the pool of 8, no second
    block to pay for (a fixed reserve for one left 3 draws); batch twins fill it with 4; at 2000 calls 15 draws
    and the best 16 on 40 examples cost 15 x 20 + 15 x 20 = 600, the screen's share."""
    problem = OracleProblem.colours()
    run = prompttune.optimize(problem.task, optimizer="reflect", serve="logprobs", budget=budget, space=problem.space,
                              backend=problem.backend, record=False,
                              options={"calibration": calibration, "write_instructions": False})
    trials = run.trials.load()
    screen = [t for t in trials if t["purpose"].startswith("screen")]
    assert sum(t["purpose"] == "screen" for t in screen) == draws
    assert screen[-1]["budget_spent"] <= 0.3 * budget


def test_the_trial_log_rebuilds_every_prompt_written_outside_the_grid(tmp_path: Path) -> None:
    """A written, swapped or calibrated prompt has no grid assignment; its logged spec is the whole prompt."""
    problem = _biased_problem()
    run = prompttune.optimize(problem.task, optimizer="reflect", budget=600, space=problem.space,
                              backend=problem.backend, runs_dir=tmp_path)
    trials = [json.loads(line) for line in (run.run_dir / "trials.jsonl").read_text().splitlines()]
    written = [t for t in trials if "spec" in t]
    assert written and all(t["candidate_id"].startswith("reflect-") for t in written)
    for t in written:
        assert spec_candidate(PromptSpec.from_dict(t["spec"]), "reflect").id == t["candidate_id"]
    shipped = json.loads((run.run_dir / "best_prompt.json").read_text())
    assert any(t["spec"] == shipped["spec"] for t in written if t["candidate_id"] == shipped["candidate_id"])


def test_prompts_built_over_a_grid_point_are_logged_with_its_values_so_the_report_weighs_the_dimensions(
        tmp_path: Path) -> None:
    """reflect draws few grid points at a small budget; its twins, written instructions and chosen demos
    carry their grid point's values (a replaced value named as the move's own), so fANOVA has enough."""
    problem = OracleProblem.colours()
    space = problem.space.bind(problem.task.splits["train"]).with_demos(2)
    run = prompttune.optimize(problem.task, optimizer="reflect", serve="logprobs", budget=300, space=space,
                              backend=problem.backend, runs_dir=tmp_path)
    trials = [json.loads(line) for line in (run.run_dir / "trials.jsonl").read_text().splitlines()]
    assert all(set(t["dimensions"]) == {d.name for d in space.dimensions} for t in trials)
    built = [t for t in trials if "spec" in t]
    assert any(t["dimensions"]["verb"] == WRITTEN for t in built)
    assert all(t["dimensions"]["few_shot.k"] == len(t["spec"]["demo_ids"]) for t in built)
    drawn = {t["candidate_id"] for t in trials} - {t["candidate_id"] for t in built}
    assert len(drawn) < MIN_FANOVA_CANDIDATES <= len({t["candidate_id"] for t in trials})
    report = (run.run_dir / "report.md").read_text()
    assert "| dimension | fANOVA importance |" in report and "fANOVA skipped" not in report


def test_refit_races_each_finalist_with_offsets_from_the_final_prefix_at_no_call(tmp_path: Path) -> None:
    problem = _biased_problem()
    run = prompttune.optimize(problem.task, optimizer="reflect", serve="logprobs", budget=600, space=problem.space,
                              backend=problem.backend, runs_dir=tmp_path)  # refit is the default
    trials = [json.loads(line) for line in (run.run_dir / "trials.jsonl").read_text().splitlines()]
    refits = [t for t in trials if t["purpose"] == "final (offsets refit)"]
    spent_before = max(t["budget_spent"] for t in trials if t["purpose"] != "final (offsets refit)")
    assert refits and all(t["budget_spent"] == spent_before for t in refits)  # the finalists' own answers
    # LabelBiasedOracle answers every prompt alike: offsets from the first n dev inputs' raw label scores.
    n_labels = len(problem.task.labels)
    for t in refits:
        prefix = problem.task.splits["dev"][: t["n"]]
        raw = [Record(ex.id, ex.label, 0, tuple((2.0 if i == 0 else 0.0) + (1.5 if i == ex.label else 0.0) - 5.0
                                                for i in range(n_labels)), None, 1, 1, False) for ex in prefix]
        assert PromptSpec.from_dict(t["spec"]).label_bias == pytest.approx(label_bias(raw), abs=1e-6)
    leader_refit = run.outcome.leader.id in {t["candidate_id"] for t in refits}
    said = "offsets measured on those" in (run.run_dir / "report.md").read_text()
    assert said == leader_refit  # the report says where the shipped offsets were measured
    off = prompttune.optimize(problem.task, optimizer="reflect", serve="logprobs", budget=600, space=problem.space,
                              backend=problem.backend, record=False, options={"refit": False})
    assert off.ledger.calls == run.ledger.calls


def test_like_dev_demos_come_from_train_examples_as_long_as_the_dev_inputs() -> None:
    """Half the train inputs are two-word fragments, every dev input a six-word sentence (as sst2's train
    phrases against its sentences): like-dev shows sentences only, in the screen's sets, k moves and swaps."""
    base = OracleProblem.colours()
    short = {e.id for e in base.task.splits["train"][1::2]}
    examples = [Example(e.id, {"text": f"fragment_{e.id} only"} if e.id in short else e.fields, e.label)
                for split in base.task.splits.values() for e in split]
    train, dev, test = (examples[:60], examples[60:180], examples[180:])
    task = Task("oracle-colours", base.task.labels, base.task.verbalizers, ["text"],
                {"train": train, "dev": dev, "test": test})
    backend = SyntheticOracleBackend(examples, lambda text: 0.85 if is_better(text) else 0.55,
                                     proposals=scripted_proposals)
    space = base.space.bind(train).with_demos(4)

    def shown(options: dict) -> set[str]:
        run = prompttune.optimize(task, optimizer="reflect", budget=2000, space=space, backend=backend,
                                  record=False, options=options)
        return {i for c in run.strategy.optimizer.pool.candidates.values() for i in c.spec.demo_ids}

    like = shown({"demo_pool": "like-dev"})
    assert like and not like & short
    assert shown({"demo_pool": "train"}) & short  # any train example otherwise
