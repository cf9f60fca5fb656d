"""reflect's parts, each built alone on the synthetic oracle's space, with answers a fake driver writes: the pool
(genomes -> candidates, answers, what stands ahead, what scoring costs), the calibrated twins (pure functions),
the race (entering prompts beside twins, race scores, the Pareto parent, the block), the moves (parents ->
children) and the final race (finalists sized to the budget, refit twins)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pytest

from prompttune.core.types import Record
from prompttune.optimizers.reflect.calibration import batch_twin, calibration_said, contextual_twin
from prompttune.optimizers.reflect.final import FinalRace
from prompttune.optimizers.reflect.genome import Genome
from prompttune.optimizers.reflect.moves import Moves
from prompttune.optimizers.reflect.options import ReflectOptions
from prompttune.optimizers.reflect.pool import Pool
from prompttune.optimizers.reflect.race import Race
from prompttune.optimizers.strategy_contract import SearchContext, TrialRequest
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.prediction import label_bias
from prompttune.search_spaces.space import Candidate
from prompttune.testing import OracleProblem

PROBLEM = OracleProblem.colours()
GOLD = {e.id: e.label for split in PROBLEM.task.splits.values() for e in split}
TRAIN = [e.id for e in PROBLEM.task.splits["train"]]
DEV = [e.id for e in PROBLEM.task.splits["dev"]]
BASELINE = PROBLEM.space.default_candidate()
GRID = Genome(BASELINE.assignment)


def written(text: str) -> Genome:
    return replace(GRID, instruction=f"{text} the colour of the item (red, green or blue).")


def record(example_id: str, scores: tuple[float, ...] | None, text: str | None = None) -> Record:
    pred = int(np.argmax(scores)) if scores is not None else GOLD[example_id] if text else None
    return Record(example_id, GOLD[example_id], pred, scores, text, 10, 1, False)


def sure(right: bool) -> Callable[[Candidate, str], Record]:
    """Every example answered right (or wrong), 2 nats ahead of the other labels."""
    def answer(candidate: Candidate, example_id: str) -> Record:
        label = GOLD[example_id] if right else (GOLD[example_id] + 1) % 3
        return record(example_id, tuple(0.0 if i == label else -2.0 for i in range(3)))
    return answer


def leaning(candidate: Candidate, example_id: str) -> Record:
    """Raw prompts lean 2 nats to the first label and 1.5 to the gold one (always 'red'); a calibrated prompt
    answers without the lean (always right)."""
    calibrated = candidate.spec.label_bias or candidate.spec.calibrate
    scores = [(0.0 if calibrated else 2.0) * (i == 0) + 1.5 * (i == GOLD[example_id]) - 5.0
              for i in range(3)]
    return record(example_id, tuple(scores))


def by_accuracy(accuracy: dict[str, float]) -> Callable[[Candidate, str], Record]:
    """Candidate k right where (7 × the example's dev position mod 10) / 10 is below accuracy[k] (0.5 where
    unlisted), with a lean to the first label that batch offsets take out."""
    def answer(candidate: Candidate, example_id: str) -> Record:
        right = (7 * DEV.index(example_id) % 10) / 10 < accuracy.get(candidate.id, 0.5)
        label = GOLD[example_id] if right else (GOLD[example_id] + 1) % 3
        return record(example_id, tuple((0.0 if i == label else -3.0) + 0.5 * (i == 0) for i in range(3)))
    return answer


def drive(plan: Iterator[TrialRequest], pool: Pool, answer: Callable[[Candidate, str], Record],
          ledger: BudgetLedger | None = None) -> tuple[Any, list[TrialRequest]]:
    """Run a stage as the driver would: answer each request into the pool's answers, charge it; the stage's value
    and the requests in order."""
    asked = []
    while True:
        try:
            request = next(plan)
        except StopIteration as stop:
            return stop.value, asked
        asked.append(request)
        pool.answers.setdefault(request.candidate.id, {}).update(
            {i: answer(request.candidate, i) for i in request.example_ids})
        if ledger is not None:
            ledger.calls += len(request.example_ids)


def answered(pool: Pool, genome: Genome, ids: Sequence[str], answer: Callable[[Candidate, str], Record]) -> str:
    candidate = pool.enter(genome)
    pool.answers[candidate.id] = {i: answer(candidate, i) for i in ids}
    return candidate.id


# -- the pool ----------------------------------------------------------------------------------------------------

def test_the_pool_builds_a_genome_once_the_grid_s_where_nothing_is_written_over_it() -> None:
    pool = Pool(PROBLEM.space)
    assert pool.build(GRID) is pool.build(GRID) and pool.key(GRID) == BASELINE.id
    pick = pool.build(written("Pick"))
    assert pick.id.startswith("reflect-") and not pick.assignment
    assert pick.spec.instruction.startswith("Pick the colour") and pick.spec.label_words == BASELINE.spec.label_words
    assert pool.build(replace(GRID, label_bias=(0.5, 0.0, -0.5))).spec.label_bias == (0.5, 0.0, -0.5)


def test_entering_a_genome_replaces_the_one_that_built_the_same_prompt_registering_keeps_it() -> None:
    pool = Pool(PROBLEM.space)
    first, same_prompt = written("Pick"), replace(written("Pick"), demo_ids=())  # the grid shows no demos either
    key = pool.enter(first).id
    assert pool.register(same_prompt).id == key and pool.genomes[key] is first
    pool.enter(same_prompt)
    assert pool.genomes[key] is same_prompt and set(pool.candidates) == {key}


def test_the_pool_asks_what_is_unanswered_and_holds_the_rest_of_a_step_ahead() -> None:
    pool = Pool(PROBLEM.space)
    a, b = pool.enter(GRID), pool.enter(written("Pick"))
    pool.answers[a.id] = {DEV[0]: sure(True)(a, DEV[0])}
    plan = pool.ask_each([(a, DEV[:2]), (b, DEV[:2])], "race")
    first = next(plan)
    assert (first.candidate, first.example_ids, first.purpose) == (a, (DEV[1],), "race")
    assert [(r.candidate, r.example_ids) for r in pool.upcoming()] == [(b, tuple(DEV[:2]))]
    assert next(plan).candidate == b and pool.upcoming() == []
    assert list(pool.ask(a, DEV[:1], "race")) == []  # answered already


def test_a_batch_twin_costs_nothing_beside_its_raw_prompt() -> None:
    pool = Pool(PROBLEM.space)
    raw, twin = pool.enter(GRID), pool.enter(replace(GRID, label_bias=(0.1, 0.0, -0.1)))
    other = pool.enter(written("Pick"))
    assert pool.cost([raw.id, twin.id], DEV[:4]) == pool.cost([twin.id], DEV[:4]) == 4
    assert pool.cost([raw.id, twin.id, other.id], DEV[:4]) == 8
    pool.answers[raw.id] = {i: sure(True)(raw, i) for i in DEV[:2]}
    assert pool.cost([twin.id], DEV[:4]) == 2 and pool.cost([other.id], DEV[:4]) == 4  # the twin reads those


def test_generated_answers_carry_no_label_scores() -> None:
    pool = Pool(PROBLEM.space)
    raw = pool.enter(GRID)
    assert not pool.lacks_label_scores(raw)  # nothing answered yet
    pool.answers[raw.id] = {i: record(i, None, "red") for i in DEV[:3]}
    assert pool.lacks_label_scores(raw)


# -- calibration -------------------------------------------------------------------------------------------------

def test_a_batch_twin_carries_its_raw_prompt_s_mean_label_scores_as_offsets() -> None:
    records = [leaning(BASELINE, i) for i in DEV[:6]]
    twin = batch_twin(GRID, records)
    assert twin is not None and twin.assignment == GRID.assignment
    assert twin.label_bias == tuple(round(x, 6) for x in label_bias(records)) and twin.label_bias[0] > twin.label_bias[1]
    assert batch_twin(GRID, [record(i, None, "red") for i in DEV[:3]]) is None
    assert contextual_twin(GRID) == replace(GRID, calibrate=True)


def test_the_report_says_how_calibration_raced() -> None:
    assert calibration_said("batch", "logprobs", True) == "batch raced"
    assert calibration_said("off", "logprobs", True) == "off"
    assert calibration_said("batch", "generate", False) == "off (serve generate: no label offsets)"


# -- the race ----------------------------------------------------------------------------------------------------

def race_of(pool: Pool, calibration: str = "batch", kind: str = "tiebreak", block: int = 6) -> Race:
    return Race(pool, DEV, block, kind, lambda rs: sum(r.correct for r in rs) / len(rs), BASELINE, calibration)


def test_a_prompt_races_beside_its_batch_twin_which_takes_a_slot_when_it_answers_otherwise() -> None:
    pool = Pool(PROBLEM.space)
    race = race_of(pool)
    (keys,), asked = drive(race.enter([replace(GRID, label_bias=(1.0, 0.0, 0.0))], "screen"), pool, leaning)
    assert [r.purpose for r in asked] == ["screen", "screen (calibrated)"]
    assert keys[0] == BASELINE.id and pool.genomes[keys[0]] == GRID  # the offsets of another prompt are dropped
    assert len(keys) == 2 and pool.candidates[keys[1]].spec.label_bias and not pool.echoes
    assert race.score(keys[1]) > race.score(keys[0])
    (again,), asked = drive(race.enter([GRID], "evolve"), pool, leaning)
    assert again == [BASELINE.id] and asked == []  # its twin raced already


def test_a_step_asks_its_raw_prompts_then_their_twins_each_with_the_rest_standing_ahead() -> None:
    """Under `choice` a twin's constrained answers take calls of their own: the model answers a step's twins in
    one batch, as it answers its raw prompts."""
    pool = Pool(PROBLEM.space)
    race = race_of(pool)
    plan, seen = race.enter([GRID, written("Pick"), written("Name")], "screen"), []
    try:
        while True:
            request = next(plan)
            seen.append((request.purpose, len(pool.upcoming())))
            pool.answers.setdefault(request.candidate.id, {}).update(
                {i: leaning(request.candidate, i) for i in request.example_ids})
    except StopIteration as stop:
        slots = stop.value
    assert seen == [("screen", 2), ("screen", 1), ("screen", 0),
                    ("screen (calibrated)", 2), ("screen (calibrated)", 1), ("screen (calibrated)", 0)]
    assert [len(keys) for keys in slots] == [2, 2, 2] and slots[0][0] == BASELINE.id


def test_a_twin_that_answers_as_its_raw_prompt_is_an_echo_without_a_slot() -> None:
    pool = Pool(PROBLEM.space)
    (keys,), asked = drive(race_of(pool).enter([GRID], "screen"), pool, sure(True))
    assert keys == [BASELINE.id] and len(asked) == 2 and len(pool.echoes) == 1


def test_generated_answers_turn_calibration_off_and_contextual_twins_are_calibrated() -> None:
    pool = Pool(PROBLEM.space)
    race = race_of(pool)
    (keys,), asked = drive(race.enter([GRID], "screen"), pool, lambda c, i: record(i, None, "red"))
    assert keys == [BASELINE.id] and len(asked) == 1 and race.calibration == "off"
    contextual = race_of(pool := Pool(PROBLEM.space), "contextual")
    (keys,), asked = drive(contextual.enter([GRID], "screen"), pool, leaning)
    assert len(asked) == 2 and pool.genomes[keys[1]].calibrate
    (none,), asked = drive(race_of(pool := Pool(PROBLEM.space), "off").enter([GRID], "screen"), pool, leaning)
    assert none == [BASELINE.id] and len(asked) == 1


def test_ties_go_to_the_baseline_and_the_staged_score_changes_kind_in_the_final_race() -> None:
    pool = Pool(PROBLEM.space)
    race = race_of(pool, "off", "staged")
    other = answered(pool, written("Pick"), race.block, sure(True))
    base = answered(pool, GRID, race.block, sure(True))
    unscored = pool.enter(written("State")).id
    assert race.by_score([other, base, unscored]) == [base, other]
    race.final_stage = True
    race.score(other)
    assert {kind for _, _, kind in race.scores} == {"probability", "tiebreak"}


def test_the_parent_is_drawn_from_the_pareto_front_and_new_answers_are_weighed_again() -> None:
    pool, rng = Pool(PROBLEM.space), np.random.default_rng(0)
    race = race_of(pool, "off")
    strong = answered(pool, written("Pick"), race.block, sure(True))
    weak = answered(pool, GRID, race.block, sure(False))
    pool.members = [strong, weak]
    assert {race.parent(rng) for _ in range(30)} == {strong}
    pool.answers[weak] = {i: sure(True)(pool.candidates[weak], i) for i in race.block}
    pool.answers[strong] = {i: sure(False)(pool.candidates[strong], i) for i in race.block}
    assert {race.parent(rng) for _ in range(30)} == {strong}  # margins are kept until the driver tells of answers
    race.forget(weak, race.block)
    race.forget(strong, race.block)
    assert {race.parent(rng) for _ in range(30)} == {weak}


def test_the_block_grows_by_half_only_where_the_free_calls_pay_for_the_members_on_it() -> None:
    pool = Pool(PROBLEM.space)
    race = race_of(pool, "off", block=8)
    pool.members = [answered(pool, g, race.block, sure(True)) for g in (GRID, written("Pick"))]
    assert drive(race.grow(free=7), pool, sure(True))[1] == [] and len(race.block) == 8
    _, asked = drive(race.grow(free=8), pool, sure(True))
    assert race.block == DEV[:12] and [(r.candidate.id, r.example_ids) for r in asked] == [
        (k, tuple(DEV[8:12])) for k in pool.members]


# -- the moves ---------------------------------------------------------------------------------------------------

class ScriptedProposer:
    """A TEST DEVICE in place of `Proposer`: a fixed critique and edit, and what was asked together."""

    def __init__(self) -> None:
        self.together: list[int] = []

    def prefetch(self, requests: Sequence[str], together: bool = False) -> None:
        self.together.append(len(requests))

    def critique(self, request: str, instruction: str, label_words: Sequence[str]) -> str:
        return "Say that the colour word decides."

    def __call__(self, request: str, max_new_tokens: int | None = None, temperature: float = 0.0,
                 seed: int = 0) -> str:
        return "Pick the colour word of the item."


def moves_of(pool: Pool, proposer: ScriptedProposer | None = None, **options: Any) -> Moves:
    context = SearchContext(pool.space, TRAIN, DEV, n_classes=3, budget=1000)
    return Moves(context, ReflectOptions(**options), pool, np.random.default_rng(0), proposer)


def test_moves_are_drawn_by_how_often_their_children_entered_the_pool() -> None:
    moves = moves_of(Pool(PROBLEM.space))
    assert moves.names == ("reflect", "grammar", "demos", "merge")  # sampling is a move only with `sampled`
    moves.made["reflect"] = 60
    drawn = [moves.draw() for _ in range(400)]
    assert drawn.count("reflect") < 20 and all(drawn.count(m) > 80 for m in ("grammar", "demos", "merge"))


def test_a_grammar_move_changes_one_dimension_never_one_a_move_wrote_over() -> None:
    pool = Pool(PROBLEM.space)
    moves = moves_of(pool)
    plain, pick = pool.enter(GRID).id, pool.enter(written("Pick")).id
    for _ in range(10):
        child = moves.grammar(plain)
        assert sum(a != b for a, b in zip(child.assignment, GRID.assignment)) == 1
        kept = moves.grammar(pick)
        assert kept.instruction == pool.genomes[pick].instruction and dict(kept.assignment)["verb"] == 0


def test_a_merge_takes_the_donor_s_instruction_and_keeps_the_parent_s_other_choices() -> None:
    pool = Pool(PROBLEM.space)
    moves = moves_of(pool)
    parent = pool.enter(replace(GRID, assignment=tuple(sorted({**dict(GRID.assignment), "output": 1}.items())))).id
    donor = pool.enter(replace(written("Pick"), assignment=tuple(sorted({**dict(GRID.assignment), "verb": 1}.items()))))
    child = moves.merge(parent, donor.id)
    assert dict(child.assignment) == {**dict(GRID.assignment), "output": 1, "verb": 1}
    assert child.instruction == pool.genomes[donor.id].instruction
    assert moves.merge(parent, None) is None and moves.merge(parent, parent) is None


def test_a_demo_swap_replaces_one_demo_by_an_example_the_parent_answered_right() -> None:
    space = PROBLEM.space.with_demos(4)
    pool = Pool(space)
    moves = moves_of(pool, minibatch=8)
    two = pool.enter(Genome(tuple(sorted({**dict(GRID.assignment), "few_shot.k": 1}.items())))).id
    demos = pool.candidates[two].spec.demo_ids
    batch = moves.swap_batch(two, 0)
    assert len(demos) == 2 and len(batch) == 8 and not set(batch) & set(demos) and set(batch) <= set(moves.demo_ids)
    pool.answers[two] = {i: sure(False)(pool.candidates[two], i) for i in batch}
    assert moves.swap_demo(two, batch) is None  # nothing answered right: no demo to bootstrap
    pool.answers[two] = {i: sure(True)(pool.candidates[two], i) for i in batch}
    swapped = moves.swap_demo(two, batch).demo_ids
    assert sum(a != b for a, b in zip(swapped, demos)) == 1 and set(swapped) - set(demos) <= set(batch)
    grid_only = Pool(PROBLEM.space)
    assert moves_of(grid_only).swap_batch(grid_only.enter(GRID).id, 0) is None  # the space searches no k


def test_reflection_critiques_the_parents_errors_and_writes_one_child_each_asked_together() -> None:
    pool, proposer = Pool(PROBLEM.space), ScriptedProposer()
    moves = moves_of(pool, proposer, minibatch=6)
    keys = [pool.enter(g).id for g in (GRID, written("State"))]
    batches = [moves.reflection_batch(k, n) for n, k in enumerate(keys)]
    assert batches[0] != batches[1] and all(len(b) == 6 for b in batches)
    for key, batch in zip(keys, batches):
        pool.answers[key] = {i: sure(False)(pool.candidates[key], i) for i in batch}
    children = moves.reflect(keys, batches)
    assert proposer.together == [2, 2]  # the critiques in one call, then the edits
    assert all(c is not None and c.instruction.startswith("Pick the colour word") for c in children)
    assert children[1].assignment == pool.genomes[keys[1]].assignment
    assert len(moves.critiques) == 2 and all(c.split()[0] in {"FP", "FN"} for c in moves.critiques)
    assert moves_of(pool).reflect(keys, batches) == [None, None]  # no proposer: nothing written


def test_a_screen_draw_shows_its_own_class_balanced_demos_and_the_baseline_stays_as_it_is() -> None:
    space = PROBLEM.space.with_demos(4)
    moves = moves_of(Pool(space))
    four = space.build({**space.default, "few_shot.k": 2})
    assert moves.screen_genome(0, BASELINE, 0.0) == GRID
    demos = moves.screen_genome(1, four, 0.0).demo_ids
    assert len(demos) == 4 and set(demos) <= set(moves.demo_ids) and len({GOLD[i] for i in demos}) == 3


# -- the final race ----------------------------------------------------------------------------------------------

ACCURACY = {"x": 0.9, "y": 0.7, "baseline": 0.5, "z": 0.3}


def final_of(options: dict[str, Any], cap: int | None) -> tuple[FinalRace, Pool, dict[str, str], SearchContext]:
    pool = Pool(PROBLEM.space)
    race = race_of(pool, "off", block=8)
    genomes = {"baseline": GRID, "x": written("Pick"), "y": written("Choose"), "z": written("Guess")}
    keys = {name: pool.key(genome) for name, genome in genomes.items()}
    answer = by_accuracy({keys[name]: accuracy for name, accuracy in ACCURACY.items()})
    pool.members = [answered(pool, genomes[name], race.block, answer) for name in ("z", "baseline", "y", "x")]
    ledger = None if cap is None else BudgetLedger(cap_calls=cap)
    context = SearchContext(PROBLEM.space, TRAIN, DEV[:24], n_classes=3, budget=cap or 0, ledger=ledger)
    return FinalRace(pool, race, ReflectOptions(**options), BASELINE), pool, keys, context


def test_the_final_race_halves_the_pool_then_sizes_the_final_prefix_and_its_finalists_to_the_calls_left() -> None:
    final, pool, keys, context = final_of({"calibration": "off"}, cap=60)
    answer = by_accuracy({keys[name]: accuracy for name, accuracy in ACCURACY.items()})
    _, asked = drive(final.run(context), pool, answer, context.ledger)
    assert [r.purpose for r in asked] == ["final race"] * 4 + ["final"] * 3
    # 32 calls put the 4 members on 16 examples; the 28 left pay for x, y and the baseline on 8 more, not for z
    assert final.final_ids == DEV[:24] and final.finalists == [keys["x"], keys["y"], keys["baseline"]]
    assert final.race.final_stage and final.ranked() == [pool.candidates[keys[n]] for n in ("x", "y", "baseline")]
    assert context.remaining() == 4


def test_a_final_race_the_calls_left_cannot_double_stays_on_the_block_and_lengthens_it_for_the_finalists() -> None:
    final, pool, keys, context = final_of({"calibration": "off"}, cap=20)  # the 4 members on 16: 32 calls
    answer = by_accuracy({keys[name]: accuracy for name, accuracy in ACCURACY.items()})
    _, asked = drive(final.run(context), pool, answer, context.ledger)
    assert [(r.purpose, len(r.example_ids)) for r in asked] == [("final", 6)] * 3
    assert len(final.race.block) == 8 and final.final_ids == DEV[:14]
    assert final.finalists == [keys["x"], keys["y"], keys["baseline"]]


def test_a_final_race_without_a_cap_scores_the_whole_pool_on_the_whole_dev_split() -> None:
    final, pool, keys, context = final_of({"calibration": "off"}, cap=None)
    drive(final.run(context), pool, by_accuracy({keys[name]: a for name, a in ACCURACY.items()}))
    assert final.final_ids == DEV[:24] and set(final.finalists) == set(keys.values())


@pytest.mark.parametrize("refit", [True, False])
def test_each_finalist_is_refit_with_offsets_from_its_answers_on_the_final_prefix(refit: bool) -> None:
    final, pool, keys, context = final_of({"refit": refit}, cap=None)
    answer = by_accuracy({keys[name]: accuracy for name, accuracy in ACCURACY.items()})
    _, asked = drive(final.run(context), pool, answer)
    refits = [r for r in asked if r.purpose == "final (offsets refit)"]
    assert len(refits) == (4 if refit else 0) and final.refits == {r.candidate.id for r in refits}
    for request in refits:
        raw = pool.key(replace(pool.genomes[request.candidate.id], label_bias=()))
        offsets = label_bias(pool.records(pool.candidates[raw], final.final_ids))
        assert request.candidate.spec.label_bias == tuple(round(x, 6) for x in offsets)
        assert request.candidate.id in final.finalists
