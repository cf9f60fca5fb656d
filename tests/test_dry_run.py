"""`optimize --dry-run` and `compare --dry-run`: the plan, printed before any search call, and exit 0; bad
input refused as the real command refuses it."""

from __future__ import annotations

from pathlib import Path

import pytest

from prompttune.cli import main
from prompttune.core.config import RunConfig
from prompttune.engine import comparison, plan
from prompttune.testing import COLOURS, colours_task_file
from tests.support import CountingBackend, oracle_for


def test_dry_run_prints_the_plan_and_charges_no_search_call(tmp_path: Path, capsys, monkeypatch) -> None:
    models: list[CountingBackend] = []

    def counted(config):
        models.append(oracle_for(config))
        return models[-1]

    monkeypatch.setattr(plan, "build_backend", counted)
    assert main(["optimize", "--task", str(colours_task_file(tmp_path)), "--optimizer", "sh", "--budget", "300",
                 "--train-size", "60", "--dev-size", "60", "--test-size", "90", "--runs-dir", str(tmp_path / "runs"),
                 "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "schedule (candidates × dev examples per round):" in out
    assert "search: at most 300 model calls (--budget)" in out
    assert "held-out verdict: at most 180 calls" in out
    assert "wall time, estimated from a probe of 8 calls" in out
    assert models[0].calls == plan.PROBE_EXAMPLES  # the probe only
    assert not (tmp_path / "runs").exists()  # no run was started


@pytest.mark.parametrize("test_size,warned", [(30, True), (1000, False)])
def test_dry_run_states_the_gain_the_test_split_confirms_and_warns_above_5_points(
        tmp_path: Path, capsys, monkeypatch, test_size: int, warned: bool) -> None:
    monkeypatch.setattr(plan, "build_backend", oracle_for)
    task = colours_task_file(tmp_path, per_colour=400)  # room for 1000 test examples
    assert main(["optimize", "--task", str(task), "--optimizer", "sh", "--budget", "300",
                 "--train-size", "60", "--dev-size", "60", "--test-size", str(test_size), "--runs-dir",
                 str(tmp_path / "runs"), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    power = next(line for line in out if line.startswith("held-out power: "))
    points = float(power.split("confirms a gain of ≥ ")[1].split(" points")[0])
    assert f"the test split of {test_size} examples" in power and "with 80% power at α = 0.05" in power
    assert (points >= 30) if warned else (points <= 5)
    warnings = [line for line in out if line.startswith("warning: ")]
    assert warnings == ([f"warning: a true gain under {points} points is confirmed with less than 80% power; about "
                         "651 test examples confirm 5 points with 80% power (--test-size)"] if warned else [])


@pytest.mark.parametrize("serve", ["", "generate"])
def test_dry_run_states_the_serving_contract(
        tmp_path: Path, capsys, monkeypatch, serve: str) -> None:
    monkeypatch.setattr(plan, "build_backend", oracle_for)
    assert main(["optimize", "--task", str(colours_task_file(tmp_path)), "--optimizer", "sh", "--budget", "300",
                 "--train-size", "60", "--dev-size", "60", "--test-size", "90", "--runs-dir", str(tmp_path / "runs"),
                 *(["--serve", serve] if serve else []), "--dry-run"]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    if serve:  # the search generates itself: nothing is kept back from its budget
        assert line.startswith("serving contract: generate (") and "kept back" not in line
    else:
        assert line.startswith("serving contract: choice (") and "set `serve: generate`" in line


def test_dry_run_does_not_combine_with_resume(tmp_path: Path, capsys) -> None:
    assert main(["optimize", "--resume", str(tmp_path), "--dry-run"]) == 2
    assert capsys.readouterr().err.startswith("error: --dry-run plans a new run")


@pytest.mark.parametrize("token_cap", [None, 5000])
def test_the_plan_names_the_token_cap_or_an_estimate(tmp_path: Path, monkeypatch, token_cap: int | None) -> None:
    monkeypatch.setattr(plan, "build_backend", oracle_for)
    config = RunConfig(task=str(colours_task_file(tmp_path)), optimizer="random", budget=300, train_size=60,
                            dev_size=60, test_size=90, budget_tokens=token_cap)
    lines = plan.plan_run(config).lines()
    assert not any(line.startswith("schedule") for line in lines)  # random search plans no rounds
    assert ("at most 5000 tokens (--budget-tokens)" if token_cap else "per call (no token cap)") in "\n".join(lines)


def _compare_args(tmp_path: Path, optimizers: str, budget: int = 300) -> list[str]:
    return ["compare", "--task", str(colours_task_file(tmp_path)), "--optimizers", optimizers, "--seeds", "2",
            "--budget", str(budget), "--train-size", "60", "--dev-size", "60", "--test-size", "90",
            "--runs-dir", str(tmp_path / "runs")]


def test_compare_dry_run_plans_every_arm_on_one_probe_and_starts_nothing(tmp_path: Path, capsys, monkeypatch) -> None:
    models: list[CountingBackend] = []

    def counted(config):
        models.append(oracle_for(config))
        return models[-1]

    monkeypatch.setattr(plan, "build_backend", counted)
    assert main([*_compare_args(tmp_path, "random,sh"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "2 optimizers × 2 seeds" in out and "seeds 0, 1; split seeds 0, 1" in out
    assert "arm random: at most 300 search calls per seed; searches " in out
    sh = next(line for line in out.splitlines() if line.startswith("arm sh:"))
    assert "schedule (candidates × dev examples per round):" in sh
    assert "search: at most 1200 calls in all (2 arms × 2 seeds)" in out
    assert "held-out verdicts: at most 720 calls" in out and "at most 360 more" in out
    assert "total: at most 2280 calls" in out and "wall time, estimated from a probe of 8 calls" in out
    assert len(models) == 1 and models[0].calls == plan.PROBE_EXAMPLES  # one probe, shared
    assert not (tmp_path / "runs").exists()


def test_compare_dry_run_shows_a_dspy_arms_sizing(tmp_path: Path, capsys, monkeypatch) -> None:
    pytest.importorskip("dspy")
    monkeypatch.setattr(plan, "build_backend", oracle_for)
    assert main([*_compare_args(tmp_path, "random,dspy-copro"), "--dry-run"]) == 0
    copro = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("arm dspy-copro:"))
    assert "at most 300 search calls per seed" in copro and "DSPy settings: COPRO: breadth=" in copro


@pytest.mark.parametrize("optimizers, budget, needs_dspy", [("random,nope", 300, False), ("random,sh", 50, False),
                                                            ("random,dspy-copro", 100, True)])
def test_compare_dry_run_refuses_bad_input_as_compare_does(tmp_path: Path, capsys, monkeypatch, optimizers: str,
                                                           budget: int, needs_dspy: bool) -> None:
    if needs_dspy:
        pytest.importorskip("dspy")

    def no_model(config):
        raise AssertionError("bad input must fail before any model loads")

    monkeypatch.setattr(plan, "build_backend", no_model)
    monkeypatch.setattr(comparison, "build_backend", no_model)
    errors = []
    for dry_run in ([], ["--dry-run"]):
        assert main([*_compare_args(tmp_path, optimizers, budget), *dry_run]) == 2
        errors.append(capsys.readouterr().err)
    assert errors[0] == errors[1] and errors[0].startswith("error: ") and errors[0].count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_compare_dry_run_does_not_combine_with_resume(tmp_path: Path, capsys) -> None:
    assert main(["compare", "--resume", str(tmp_path), "--dry-run"]) == 2
    assert capsys.readouterr().err.startswith("error: --dry-run plans a new comparison")


def test_a_token_matched_compare_plans_on_its_token_cap(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(plan, "build_backend", oracle_for)
    assert main([*_compare_args(tmp_path, "random,sh", budget=600), "--match", "tokens", "--budget-tokens", "5000",
                 "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "arm random: at most 5000 search tokens (and a ceiling of 600 search calls) per seed" in out
    assert "search: at most 2400 calls in all (2 arms × 2 seeds), at most 5000 tokens each (--budget-tokens)" in out


def test_optimize_dry_run_shows_a_dspy_arms_sizing(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("dspy")
    monkeypatch.setattr(plan, "build_backend", oracle_for)
    config = RunConfig(task=str(colours_task_file(tmp_path)), optimizer="dspy-bfrs", budget=300, train_size=60,
                       dev_size=60, test_size=90)
    assert any(line.startswith("DSPy settings: BootstrapFewShotWithRandomSearch") for line in plan.plan_run(config).lines())


def test_compare_refuses_a_test_size_that_gives_every_seed_the_same_test_split(tmp_path: Path, capsys) -> None:
    """A task file whose split column gives test 60 rows: at --test-size 1000 every seed would test
    on all of them, and the across-seed statistics would see no test sampling. Refused before any
    model loads; 40 is fine."""
    rows = [f"item {i:03d} is painted {c},{c},{'test' if i < 20 else 'dev' if i < 60 else 'train'}"
            for i in range(120) for c in COLOURS]
    (tmp_path / "split.csv").write_text("text,colour,split\n" + "\n".join(rows) + "\n")
    task = tmp_path / "split.yaml"
    task.write_text("name: split\ndata: split.csv\ntext_columns: [text]\nlabel_column: colour\nsplit_column: split\n")
    args = ["compare", "--task", str(task), "--optimizers", "random,sh", "--seeds", "2", "--budget", "400",
            "--train-size", "100", "--dev-size", "100", "--runs-dir", str(tmp_path / "runs"), "--dry-run"]
    assert main([*args, "--test-size", "1000"]) == 2
    err = capsys.readouterr().err
    assert "seeds 0, 1 share a test split of 60 examples" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()
    comparison.check_compare(comparison.CompareRequest(
        RunConfig(task=str(task), budget=400, train_size=100, dev_size=100, test_size=40), ["random", "sh"], [0, 1]))
