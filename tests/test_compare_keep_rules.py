"""compare on the synthetic oracle: one space for every arm (same-space vs native), the per-seed
table with paired tests across seeds, and every arm shown raw and guarded by the verdict protocol."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console
from scipy import stats

from prompttune.commands.compare import add_parser as add_compare_commands
from prompttune.comparing.coverage import INSTRUCTION, aspect_of, coverage_check, plan_coverage, touched_fields
from prompttune.core.errors import UserError
from prompttune.dspy_bridge import DSPY_ARMS
from prompttune.engine.comparison import CompareRequest, run_compare
from prompttune.optimizers import OPTIMIZERS
from prompttune.optimizers.registry import strategies
from prompttune.results.compare import CompareResult
from prompttune.search_spaces import build_space, default_space
from prompttune.search_spaces.space import SPEC_FIELDS
from tests.support import oracle_config, oracle_for, task_of

QUIET = Console(quiet=True)


def _compare(tmp_path: Path, arms: list[str], seeds: list[int], mode: str = "same-space", accuracy=None,
             **changes) -> tuple[CompareResult, object]:
    config = oracle_config(tmp_path, **changes)
    backend = oracle_for(config, accuracy) if accuracy else oracle_for(config)
    return run_compare(CompareRequest(config, arms, seeds, {}, backend=backend, console=QUIET, mode=mode,
                                      allow_underspend=True)), backend  # hill-climbers stop early on the small oracle task


def _trial_demos(run_dir: Path) -> set[tuple[str, ...]]:
    return {tuple(json.loads(line).get("demo_ids", [])) for line in (run_dir / "trials.jsonl").read_text().splitlines()}


@pytest.fixture(scope="module")
def same_space(tmp_path_factory: pytest.TempPathFactory) -> CompareResult:
    return _compare(tmp_path_factory.mktemp("same"), ["random", "mipro"], [0])[0]


def test_same_space_gives_every_arm_one_space_and_holds_what_it_cannot_search(same_space: CompareResult,
                                                                              tmp_path: Path) -> None:
    c = same_space
    space = default_space(task_of(c.config))
    assert {r.space_hash for r in c.runs} == {cov.space_hash for cov in c.coverage.values()} == {space.fingerprint()}
    dims = [d.name for d in space.dimensions]
    assert c.coverage["random"].searched == tuple(dims) and c.coverage["random"].held == ()
    mipro = c.coverage["mipro"]
    assert mipro.held == ("demos (the space declares none)",) and mipro.options == {"demo_sets": 1}
    touched = touched_fields(space, dims)  # what some listed value changes: every other field stays the baseline's
    assert c.coverage["random"].held_fields == SPEC_FIELDS - touched
    assert mipro.held_fields == (SPEC_FIELDS - touched - {"instruction"}) | {"demo_ids"}
    assert c.coverage["random"].sources == ("listed values",)
    assert mipro.sources == ("listed values", "written by a model")
    # The default space declares no few-shot, so in same-space mode mipro never tried a demo; natively it does.
    mipro_run = c.runs[1]
    assert _trial_demos(mipro_run.run_dir) == {()} and mipro_run.raw.demo_ids == ()
    native, _ = _compare(tmp_path, ["mipro"], [0], mode="native")
    assert native.coverage["mipro"].held == () and len(_trial_demos(native.runs[0].run_dir)) > 1
    assert all(check.status != "failed" for check in c.checks), [k for k in c.checks if not k.ok]
    report = (c.run_dir / "report.md").read_text()
    for needle in ("optimizer comparison on one space", "## What each arm searched", "`demo_sets=1`",
                   f"hash {space.fingerprint()}"):
        assert needle in report
    assert "tool comparison, native spaces" in (native.run_dir / "report.md").read_text()
    summary = json.loads((c.run_dir / "summary.json").read_text())
    assert summary["mode"] == "same-space" and summary["arms"][1]["coverage"]["held"] == list(mipro.held)
    page = (c.run_dir / "report.html").read_text()
    assert "<h2>What each arm searched" in page and "Optimizer comparison on one space" in page


def test_same_space_holds_every_arm_to_the_dimensions_all_of_them_can_search(tmp_path: Path) -> None:
    """With an instruction writer in the mix, the grid searchers search the instruction only."""
    c, _ = _compare(tmp_path, ["random", "sh", "cople"], [0])
    space = default_space(task_of(c.config))
    instruction = [d.name for d in space.dimensions if aspect_of(d) == INSTRUCTION]
    assert instruction and len(instruction) < len(space.dimensions)
    for arm, coverage in c.coverage.items():
        assert coverage.dimensions == instruction
        assert [name.split(" (")[0] for name in coverage.searched] == instruction
    shared = space.searching_only(instruction)
    assert {r.space_hash for r in c.runs} == {shared.fingerprint()} != {space.fingerprint()}
    for run in c.runs:  # every arm's picks change only what the instruction dimensions change
        assert run.raw.with_updates(instruction=run.baseline.instruction) == run.baseline
    config = json.loads((c.runs[0].run_dir / "config.json").read_text())
    assert config["dimensions"] == instruction
    summary = json.loads((c.run_dir / "summary.json").read_text())
    assert summary["arms"][2]["coverage"]["sources"] == ["written by a model"]
    assert "| searched | candidates from |" in (c.run_dir / "report.md").read_text()
    assert all(check.status != "failed" for check in c.checks), [k for k in c.checks if not k.ok]
    # An arm that stepped outside the shared dimensions fails the coverage check.
    stray = replace(c.runs[0], raw=c.runs[0].raw.with_updates(output_template="Colour: {}"))
    check = coverage_check([stray, *c.runs[1:]], {0: c.coverage})
    assert not check.ok and check.detail == "random s0"


def test_a_mix_that_shares_no_dimension_is_one_line(tmp_path: Path) -> None:
    task = task_of(oracle_config(tmp_path))
    both = build_space({"name": "both", "instructions": ["Name the colour.", "Which colour is it?"],
                        "few_shot": {"k": [0, 2]}}, task).bind(task.splits["train"])
    with pytest.raises(UserError, match=r"no dimension of space 'both' can be searched by every arm \(cople: "
                                        r"instruction \(writes its own instruction\); bfrs: few_shot.k"):
        plan_coverage(["cople", "bfrs"], both, "same-space", {})


def test_the_coverage_check_fails_on_a_changed_held_field_or_another_space(same_space: CompareResult) -> None:
    c = same_space
    mipro = c.runs[1]
    with_demos = replace(mipro, raw=mipro.raw.with_updates(demo_ids=("x",)))
    other_space = replace(c.runs[0], space_hash="0" * 12)
    check = coverage_check([c.runs[0], with_demos], {0: c.coverage})
    assert not check.ok and check.detail == "mipro s0"
    check = coverage_check([other_space, mipro], {0: c.coverage})
    assert not check.ok and check.detail == "random s0"


def test_a_dspy_arm_holds_format_and_label_words_and_stays_zero_shot_on_the_default_space(tmp_path: Path) -> None:
    pytest.importorskip("dspy")
    c, _ = _compare(tmp_path, ["dspy-mipro"], [0])
    cov, run = c.coverage["dspy-mipro"], c.runs[0]
    assert cov.searched == ("instruction (writes its own instruction)",) and cov.options == {"max_demos": 0}
    assert cov.held == ("input_name", "output_name", "intra_separator", "label_words",
                        "demos (the space declares none)")
    trials = [json.loads(line) for line in (run.run_dir / "trials.jsonl").read_text().splitlines()]
    assert any(t["instruction"] != run.baseline.instruction for t in trials)  # it did search: proposals were scored
    assert run.raw == run.baseline.with_updates(instruction=run.raw.instruction)
    assert all(check.status != "failed" for check in c.checks)


def test_every_arm_declares_its_reach_and_its_hold_options_are_valid() -> None:
    assert set(strategies()) == {*OPTIMIZERS, *DSPY_ARMS}
    for name in OPTIMIZERS:
        for options in strategies()[name].reach.holds.values():
            strategies()[name].check(dict(options), 300, 60, 60)


def test_same_space_refuses_an_arm_it_cannot_hold_to_the_space(tmp_path: Path) -> None:
    task = task_of(oracle_config(tmp_path))
    space = default_space(task)
    with pytest.raises(UserError, match="bfrs only chooses its own demos, and space 'colours-default' declares no "
                                        "dimension for that"):
        plan_coverage(["random", "bfrs"], space, "same-space", {})
    with pytest.raises(UserError, match="--option mipro.demo_sets=4 would let mipro add demos"):
        plan_coverage(["mipro"], space, "same-space", {"mipro": {"demo_sets": 4}})
    assert plan_coverage(["bfrs"], space, "native", {})["bfrs"].searched == (
        "chooses its own demos (the space declares no demos)",)
    few_shot = build_space({"name": "shots", "instructions": ["Name the colour.", "Pick one of {labels}."],
                            "few_shot": {"k": [0, 2]}}, task)
    bfrs = plan_coverage(["bfrs"], few_shot, "same-space", {})["bfrs"]
    assert bfrs.searched == tuple(f"few_shot.{key} (chooses its own demos)" for key in ("k", "selection", "order"))
    assert bfrs.held == ("instruction",) and bfrs.options == {}
    assert "instruction" in bfrs.held_fields and "demo_ids" not in bfrs.held_fields
    no_instruction = build_space({"name": "formats", "few_shot": {"k": [0, 2]}, "choices": {"output_template": {
        "values": ["Answer: {}", "Label: {}"]}}}, task)
    with pytest.raises(UserError, match="dspy-mipro always writes its own instruction, and space 'formats' "
                                        "declares no instruction"):
        plan_coverage(["dspy-mipro"], no_instruction, "same-space", {})
    assert plan_coverage(["mipro"], no_instruction, "same-space", {})["mipro"].options == {"instructions": 1}


def test_the_mode_is_a_command_line_choice(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_compare_commands(parser.add_subparsers(dest="command"))
    assert parser.parse_args(["compare"]).mode == "same-space" and parser.parse_args(["compare"]).seeds == 5
    with pytest.raises(SystemExit):
        parser.parse_args(["compare", "--mode", "mixed"])


def test_per_seed_table_and_paired_tests_rank_the_arm_that_can_reach_the_better_prompt(tmp_path: Path) -> None:
    # random can reach the 'Label:' output (+0.3); bfrs only chooses demos, which the oracle ignores.
    c, _ = _compare(tmp_path, ["random", "bfrs"], [0, 1, 2], mode="native")
    by = {(r.arm, r.seed): r for r in c.runs}
    rows = (c.run_dir / "report.md").read_text().split("## Per seed")[1].split("##")[0]
    for r in c.runs:
        assert (f"| {r.arm} | {r.seed} | {r.raw_confirmation.best_accuracy:.3f} | " in rows
                and f"| {r.confirmation.best_accuracy:.3f} | {r.search.calls} | " in rows)
    for keep, accuracy in (("guarded", lambda r: sum(r.test_correct) / len(r.test_correct)),
                           ("raw", lambda r: r.raw_confirmation.best_accuracy)):
        pair = next(t for t in c.seed_pairs if t.keep == keep)
        first = [accuracy(by[("random", s)]) for s in (0, 1, 2)]
        second = [accuracy(by[("bfrs", s)]) for s in (0, 1, 2)]
        assert (pair.first, pair.second, pair.seeds) == ("random", "bfrs", 3)
        assert pair.mean_diff == pytest.approx(sum(first) / 3 - sum(second) / 3) and pair.mean_diff > 0.25
        assert pair.p_bh < 0.05
    guarded, raw = (next(t for t in c.seed_pairs if t.keep == keep) for keep in ("guarded", "raw"))
    # Each seed draws its own data, so the differences vary; no test gives p = 0. Three seeds on one side:
    # 2 of the 8 sign patterns are as extreme, the permutation test's floor.
    assert len({r.test_ids for r in c.runs}) == 3
    assert guarded.p_perm == raw.p_perm == 0.25 and 0 < guarded.p < 0.05
    assert guarded.p_cmh is not None and 0 < guarded.p_cmh < 1e-6 and raw.p_cmh is None
    raw_accuracy = {key: r.raw_confirmation.best_accuracy for key, r in by.items()}
    assert raw.p == pytest.approx(stats.ttest_rel([raw_accuracy[("random", s)] for s in (0, 1, 2)],
                                                  [raw_accuracy[("bfrs", s)] for s in (0, 1, 2)]).pvalue)
    random_arm = c.summaries[0]
    assert random_arm.guarded.accuracy > c.summaries[1].guarded.accuracy + 0.25
    assert random_arm.guarded.accuracy_ci[0] <= random_arm.guarded.accuracy <= random_arm.guarded.accuracy_ci[1]
    page = (c.run_dir / "report.html").read_text()
    assert "<h2>Arms head to head across seeds" in page and "raw pick: test acc" in page


def test_raw_and_guarded_differ_when_the_raw_pick_is_not_confirmed_and_cost_no_extra_call(tmp_path: Path) -> None:
    # Every prompt is equally good: random's dev winner is only lucky on dev, so the test split does not confirm it.
    c, backend = _compare(tmp_path, ["random"], [0], accuracy=lambda text: 0.6)
    run = c.runs[0]
    assert run.raw != run.baseline and run.best == run.baseline
    assert run.confirmation.best_accuracy == run.confirmation.baseline_accuracy
    assert run.raw_confirmation.best_accuracy != run.confirmation.best_accuracy
    assert c.summaries[0].raw.accuracy == run.raw_confirmation.best_accuracy != c.summaries[0].guarded.accuracy
    assert "| random | 0 | 0.567 | not confirmed | 0.611 |" in (c.run_dir / "report.md").read_text()
    # The raw pick's test figures are the verdict's own: baseline and raw pick on test, nothing more.
    assert run.confirm_calls == 2 * c.config.test_size
    assert backend.calls == run.search.calls + run.confirm_calls


def test_native_demos_let_the_grid_searchers_try_demos(tmp_path: Path) -> None:
    config = oracle_config(tmp_path)
    c = run_compare(CompareRequest(config, ["random"], [0], {}, backend=oracle_for(config), console=QUIET,
                                   mode="native", native_demos=4, allow_underspend=True))
    assert "few_shot.k" in c.coverage["random"].searched
    run_dir = c.runs[0].run_dir
    assert json.loads((run_dir / "config.json").read_text())["native_demos"] == 4
    ks = {json.loads(line)["dimensions"]["few_shot.k"] for line in (run_dir / "trials.jsonl").read_text().splitlines()}
    assert ks <= {0, 2, 4} and ks - {0}  # it tried prompts with demos
    assert len(c.runs[0].raw.demo_ids) in ks and all(check.status != "failed" for check in c.checks)
    with pytest.raises(UserError, match="--native-demos adds demos .* it needs --mode native"):
        run_compare(CompareRequest(config, ["random"], [0], {}, backend=oracle_for(config), native_demos=4))
