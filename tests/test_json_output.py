"""`--json`: after the run, ONE JSON object on stdout and nothing else (progress stays on stderr)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prompttune.cli import main
from prompttune.engine import comparison, evaluate, study
from prompttune.testing import colours_task_file
from tests.support import oracle_for

SIZES = ["--train-size", "60", "--dev-size", "60", "--test-size", "90"]


def _json_out(capsys: pytest.CaptureFixture, argv: list[str], tmp_path: Path) -> dict:
    assert main([*argv, "--task", str(colours_task_file(tmp_path)), *SIZES, "--runs-dir", str(tmp_path / "runs"),
                 "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one line: the object
    return json.loads(out)


def test_optimize_json_holds_the_verdict_accuracies_p_value_and_spend(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(study, "build_backend", oracle_for)
    result = _json_out(capsys, ["optimize", "--optimizer", "random", "--budget", "300"], tmp_path)
    assert {"verdict", "confirmed", "baseline_test_accuracy", "shipped_test_accuracy", "p_value",
            "verdict_calls"} <= result.keys()
    assert result["spend"]["cap_calls"] == 300 and 0 < result["spend"]["calls"] <= 300 and result["spend"]["tokens"]
    assert Path(result["run_dir"], "verdict.json").is_file()


def test_compare_json_holds_each_arms_guarded_and_raw_means_and_the_checks(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(comparison, "build_backend", oracle_for)
    result = _json_out(capsys, ["compare", "--optimizers", "random,sh", "--seeds", "1", "--budget", "300"], tmp_path)
    assert [arm["arm"] for arm in result["arms"]] == ["random", "sh"]
    for arm in result["arms"]:
        assert {"guarded_test_accuracy", "raw_test_accuracy"} <= arm.keys()
        assert arm["runs"][0]["spend"]["calls"] <= result["cap"]["limit"] == 300
    assert result["checks"] and all(check["status"] == "ok" for check in result["checks"])
    summary = json.loads(Path(result["run_dir"], "summary.json").read_text())
    for arm, saved in zip(result["arms"], summary["arms"]):  # the class flags the report shows
        assert [r["class_losses"] for r in arm["runs"]] == [r["per_class"]["losses"] for r in saved["runs"]]


def test_evaluate_json_holds_each_prompts_scores(tmp_path, capsys, monkeypatch) -> None:
    sizes = {"train_size": 60, "dev_size": 60, "test_size": 90}  # evaluate's model config carries no split sizes
    monkeypatch.setattr(evaluate, "build_backend", lambda config: oracle_for(config.model_copy(update=sizes)))
    result = _json_out(capsys, ["evaluate", "--sample", "3", "--class-loss-margin", "0"], tmp_path)
    prompts = result["settings"][0]["prompts"]
    assert len(prompts) == 3 and all(0 <= p["accuracy"] <= 1 for p in prompts)
    assert result["calls"] == 3 * 90 == 3 * result["examples"]
    summary = json.loads(Path(result["run_dir"], "summary.json").read_text())
    for setting in result["settings"]:  # the class flags the report shows, against the first prompt
        assert setting["class_losses"] == summary["per_class"][setting["scoring"]]["losses"]
    assert any(setting["class_losses"] for setting in result["settings"])  # margin 0: some class drops
