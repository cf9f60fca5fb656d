"""Named variant arms: one optimizer beside itself under other options in one comparison (the headline's
reflect with calibration off), each arm run, reported and resumed under its own name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prompttune.cli import main
from prompttune.commands.compare import parse_arms
from prompttune.core.errors import UserError
from prompttune.engine import comparison
from prompttune.engine.comparison import resume_compare
from prompttune.testing import colours_task_file
from tests.support import oracle_for


def _arm_configs(run_dir: Path) -> dict[str, dict]:
    """Each finished arm's name -> its run's config.json."""
    arms = [json.loads(path.read_text()) for path in sorted(run_dir.glob("arms/*/arm.json"))]
    return {(arm["arm"], arm["seed"]): json.loads((Path(arm["run_dir"]) / "config.json").read_text())
            for arm in arms}


def test_two_arms_of_one_optimizer_with_other_options_run_side_by_side(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(comparison, "build_backend", oracle_for)
    assert main(["compare", "--task", str(colours_task_file(tmp_path)), "--optimizers", "sh,sh-eta2=sh:eta=2",
                 "--option", "sh-eta2.min_examples=10", "--seeds", "2", "--budget", "300", "--train-size", "60",
                 "--dev-size", "60", "--test-size", "90", "--allow-underspend", "--runs-dir", str(tmp_path / "runs")]) == 0
    [run_dir] = (tmp_path / "runs").glob("*-compare")
    configs = _arm_configs(run_dir)
    assert sorted(configs) == [("sh", 0), ("sh", 1), ("sh-eta2", 0), ("sh-eta2", 1)]
    assert {c["optimizer"] for c in configs.values()} == {"sh"}
    assert configs[("sh-eta2", 0)]["optimizer_options"] == {"eta": 2, "min_examples": 10}
    assert configs[("sh", 0)]["optimizer_options"] == {}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [arm["arm"] for arm in summary["arms"]] == ["sh", "sh-eta2"]
    assert [(t["first"], t["second"]) for t in summary["seed_pairs"]] == [("sh", "sh-eta2")] * 2
    report = (run_dir / "report.md").read_text()
    assert "| sh-eta2 |" in report and "descriptive: pooled examples, prompts fixed" in report
    assert "1e-300" not in report
    # compare checks generation only when asked (--check-generation N): each arm-seed's config holds 0
    assert "Served by generation" not in report and {c["check_generation"] for c in configs.values()} == {0}
    # Resumed to add an arm, both variants are read back under their own names, not run again.
    capsys.readouterr()
    resumed = resume_compare(run_dir, backend=oracle_for(comparison.RunConfig.model_validate(
        json.loads((run_dir / "config.json").read_text())["run"])), add=["random"], progress=True)
    assert [s.arm for s in resumed.summaries] == ["sh", "sh-eta2", "random"]
    err = capsys.readouterr().err
    assert all(f"{arm} seed {seed}: finished before the interruption" in err for arm in ("sh", "sh-eta2")
               for seed in (0, 1))


def test_a_variant_spec_is_parsed_with_its_options_read_as_option_values() -> None:
    assert parse_arms("reflect, reflect-nocal=reflect:calibration=off:refit=no") == (
        ["reflect", "reflect-nocal"], {"reflect-nocal": {"optimizer": "reflect", "calibration": "off", "refit": "no"}})
    assert parse_arms("sh,fast=sh:eta=3") == (["sh", "fast"], {"fast": {"optimizer": "sh", "eta": 3}})


@pytest.mark.parametrize("optimizers, message", [
    ("sh,x=sh:eta", "a named variant is NAME=OPTIMIZER:KEY=VALUE:..."),
    ("sh,=sh:eta=2", "a named variant is NAME=OPTIMIZER:KEY=VALUE:..."),
    ("sh,random=sh:eta=2", "variant name 'random' must differ from every optimizer's name"),
    ("sh,a.b=sh:eta=2", "variant name 'a.b' must differ from every optimizer's name and hold no '.'"),
    ("a=sh:eta=3,b=sh:eta=3", "arms a and b run sh with the same options"),
    ("sh,x=nosuch:eta=2", "unknown optimizer 'nosuch'"),
    ("sh,x=sh:nosuch=2", "nosuch"),
])
def test_a_bad_variant_is_one_line_before_any_model_loads(optimizers: str, message: str, tmp_path: Path,
                                                          capsys, monkeypatch) -> None:
    monkeypatch.setattr(comparison, "build_backend", lambda config: pytest.fail("no model may load"))
    code = main(["compare", "--task", str(colours_task_file(tmp_path)), "--optimizers", optimizers, "--seeds", "1",
                 "--budget", "300", "--train-size", "60", "--dev-size", "60", "--test-size", "90",
                 "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1, err


def test_parse_arms_refuses_before_the_engine() -> None:
    with pytest.raises(UserError, match="variant name 'sh'"):
        parse_arms("sh=random:batch=2")


def test_a_variant_whose_options_hold_calibration_is_shown_holding_it(tmp_path: Path) -> None:
    from prompttune.comparing.coverage import plan_coverage
    from prompttune.search_spaces import default_space
    from tests.support import oracle_config, task_of

    task = task_of(oracle_config(tmp_path))
    options = {"reflect-nocal": {"optimizer": "reflect", "calibration": "off"}}
    coverage = plan_coverage(["reflect", "reflect-nocal"], default_space(task), "native", options)
    assert any("calibrates" in text for text in coverage["reflect"].searched)
    assert not any("calibrates" in text for text in coverage["reflect-nocal"].searched)
    assert "calibration (its options hold it)" in coverage["reflect-nocal"].held
    assert coverage["reflect-nocal"].options == {"calibration": "off"}
    assert coverage["reflect"].searched[:-1] == coverage["reflect-nocal"].searched  # the rest searched alike


def test_a_variant_the_mode_makes_identical_to_its_optimizer_is_refused(tmp_path: Path) -> None:
    from prompttune.engine.comparison import CompareRequest, check_compare
    from tests.support import oracle_config

    options = {"reflect-nocal": {"optimizer": "reflect", "calibration": "off"}}
    # Same-space mode holds reflect's calibration off anyway (the space declares none): the two arms are one.
    with pytest.raises(UserError, match="arms reflect and reflect-nocal would run the same search in same-space mode"):
        check_compare(CompareRequest(oracle_config(tmp_path), ["reflect", "reflect-nocal"], [0], options,
                                     mode="same-space"))
    check_compare(CompareRequest(oracle_config(tmp_path), ["reflect", "reflect-nocal"], [0], options, mode="native"))
