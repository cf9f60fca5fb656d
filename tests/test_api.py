"""The Python API: in-memory tasks, spaces built in Python, callable objectives, quiet library calls,
and a result whose shipped prompt renders exactly what the run wrote (on the synthetic oracle)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import prompttune
from prompttune import Dimension, PromptSpec, SearchSpace, Task
from prompttune.core.errors import UserError
from prompttune.core.run_files import CODE, VERDICT_REGISTRY
from prompttune.engine.verdicts import look_alpha
from prompttune.testing import OracleProblem, SyntheticOracleBackend, demo_task
from tests.support import oracle_config, oracle_for

REPO = Path(__file__).resolve().parent.parent


def _label_helps(text: str) -> float:
    return 0.9 if "Label:" in text else 0.5


def test_in_memory_records_and_the_oracle_give_a_result_that_renders_the_shipped_prompt(tmp_path: Path) -> None:
    """The bar, as a user types it: `python -c "import prompttune; ..."` on a dozen examples per split."""
    script = f"""
import prompttune
from prompttune.testing import SyntheticOracleBackend
rows = lambda split: [{{"text": f"{{split}} item {{i:02d}} painted " + c, "colour": c}}
                      for i in range(4) for c in ("red", "green", "blue")]
task = prompttune.Task.from_records(train=rows("train"), dev=rows("dev"), test=rows("test"), label="colour")
model = SyntheticOracleBackend.for_task(task, lambda text: 0.9 if "Label:" in text else 0.5)
result = prompttune.optimize(task, optimizer="random", budget=60, backend=model, runs_dir={str(tmp_path)!r})
print(result.shipped.render(task.splits["test"][0]) + "\\n" == (result.run_dir / "best_prompt.txt").read_text())
print(len(task.splits["dev"]), result.verdict.summary())
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    same, summary = done.stdout.splitlines()
    assert same == "True" and summary.startswith("12 ")
    assert done.stderr == ""  # a library call prints nothing


def test_a_space_built_in_python_and_a_callable_objective(tmp_path: Path) -> None:
    task = demo_task()
    base = PromptSpec(input_templates=(("text", "Text: {}"),), label_words=("blue", "green", "red"))
    space = SearchSpace("mine", base, [Dimension("output", ("Answer: {}", "Label: {}"), "output_template")])
    seen: list[int] = []

    def share_right(gold, pred, n_classes) -> float:
        seen.append(len(gold))
        return sum(g == p for g, p in zip(gold, pred)) / len(gold)
    result = prompttune.optimize(task, optimizer="random", budget=120, space=space, objective=share_right,
                                 backend=SyntheticOracleBackend.for_task(task, _label_helps), record=False)
    assert seen and result.run_dir is None
    assert result.shipped.spec.output_template == "Label: {}" and result.verdict.confirmed is not None
    assert result.config.objective == "custom:share_right"
    assert result.ledger.calls <= 120 and result.ledger is result.search_ledger


def test_save_and_to_dspy_carry_what_the_verdict_shipped(tmp_path: Path) -> None:
    task = demo_task()
    result = prompttune.optimize(task, optimizer="random", budget=300,
                                 backend=SyntheticOracleBackend.for_task(task, _label_helps), runs_dir=str(tmp_path))
    out = result.save(tmp_path / "shipped")
    saved = json.loads((out / "prompt.json").read_text())
    assert saved["verdict"] == result.verdict.summary() and saved["spec"]["output_template"] == "Label: {}"
    assert (out / "prompt.txt").read_text().rstrip("\n") == result.shipped.template()
    assert "{text}" in result.shipped.template()
    pytest.importorskip("dspy")
    spec = result.shipped.spec
    instructions = spec.instruction.replace("{labels}", ", ".join(spec.label_words))
    assert prompttune.to_dspy(result).signature.instructions == instructions


def test_records_errors_are_one_line_user_errors() -> None:
    rows = [{"text": "a", "label": "x"}, {"text": "b", "label": "y"}]
    with pytest.raises(UserError, match="give either records or all of train, dev and test"):
        Task.from_records(label="label")
    with pytest.raises(UserError, match="row 0 lacks colour"):
        Task.from_records(rows, label="colour")
    with pytest.raises(UserError, match="labels not listed in labels: y"):
        Task.from_records(rows * 4, label="label", labels=["x", "z"])
    with pytest.raises(UserError, match="split 'test' is empty"):
        Task.from_records(train=rows, dev=rows, test=[], label="label")
    frame = pytest.importorskip("pandas").DataFrame(rows * 8)
    assert Task.from_records(frame, label="label").labels == ["x", "y"]


def test_a_library_call_leaves_signal_handlers_alone(monkeypatch) -> None:
    installed: list[int] = []
    monkeypatch.setattr(signal, "signal", lambda number, handler: installed.append(number))
    task = demo_task()
    prompttune.optimize(task, optimizer="random", budget=120, backend=SyntheticOracleBackend.for_task(task, _label_helps),
                        record=False)
    assert installed == []


def test_evaluate_and_compare_from_python(tmp_path: Path) -> None:
    task = demo_task()
    model = SyntheticOracleBackend.for_task(task, _label_helps)
    evaluation = prompttune.evaluate(task, prompts=["Colour of: {text}\nAnswer:", "Colour of: {text}\nLabel:"],
                                     backend=model, runs_dir=tmp_path)  # a Path, as Python users hold them
    first, second = (s.accuracy for s in evaluation.settings[0].scores)
    assert second > first and (evaluation.run_dir / "report.md").is_file()
    config = oracle_config(tmp_path / "compare")
    comparison = prompttune.compare(config.task, optimizers=["random", "sh"], seeds=2, budget=config.budget,
                                    backend=oracle_for(config), train_size=config.train_size,
                                    dev_size=config.dev_size, test_size=config.test_size, runs_dir=config.runs_dir)
    assert [(r.arm, r.seed) for r in comparison.runs] == [("random", 0), ("random", 1), ("sh", 0), ("sh", 1)]
    assert all(check.ok for check in comparison.checks)


def test_interim_and_final_looks_never_spend_more_than_alpha() -> None:
    spent = 0.0
    for _ in range(5):  # five graceful stops, each an interim verdict, then the final one
        spent += look_alpha(0.05, spent, interim=True)
    assert spent + look_alpha(0.05, spent, interim=False) == pytest.approx(0.05)


def test_every_verdict_on_a_test_split_is_counted_and_a_reused_split_warned(tmp_path: Path) -> None:
    task = demo_task()

    def run(seed: int):
        return prompttune.optimize(task, optimizer="random", budget=120, seed=seed, runs_dir=str(tmp_path),
                                   backend=SyntheticOracleBackend.for_task(task, _label_helps))
    first, second = run(0), run(1)
    assert (first.test_looks, second.test_looks) == (1, 2)
    looks = [json.loads(line) for line in (tmp_path / VERDICT_REGISTRY).read_text().splitlines()]
    assert [look["kind"] for look in looks] == ["final", "final"] and looks[0]["test_hash"] == looks[1]["test_hash"]
    assert "first verdict recorded on this test split" in (first.run_dir / "report.md").read_text()
    assert "This test split has now served 2 verdicts" in (second.run_dir / "report.md").read_text()
    assert json.loads((second.run_dir / "verdict.json").read_text())["verdict"]["test_split_verdicts"] == 2


def test_every_run_directory_records_the_code_that_made_it(tmp_path: Path) -> None:
    """code.jsonl names the version, the source imported and (in a git checkout) the commit."""
    problem = OracleProblem.colours()
    run = prompttune.optimize(problem.task, optimizer="random", budget=300, space=problem.space,
                              backend=problem.backend, runs_dir=str(tmp_path))
    lines = [json.loads(line) for line in (run.run_dir / CODE).read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["version"] == prompttune.__version__
    assert Path(lines[0]["source"]) == Path(prompttune.__file__).resolve().parent
    assert lines[0]["commit"] is None or (len(lines[0]["commit"]) == 40 and isinstance(lines[0]["dirty"], bool))


# -- load_run: a finished run reopened from its directory ---------------------------------------------

def test_load_run_reopens_a_finished_oracle_run_as_it_recorded_itself(tmp_path: Path) -> None:
    task = demo_task()
    model = SyntheticOracleBackend.for_task(task, _label_helps)
    result = prompttune.optimize(task, optimizer="random", budget=300, backend=model, runs_dir=str(tmp_path))
    run = prompttune.load_run(str(result.run_dir))
    assert run.run_dir == result.run_dir and run.config == result.config
    assert (run.shipped.id, run.dev_winner.id, run.baseline.id) == (
        result.verdict.shipped.id, result.verdict.dev_winner.id, result.verdict.baseline.id)
    assert run.shipped.spec == result.shipped.spec and run.baseline.spec == result.baseline.spec
    assert run.confirmed == (result.verdict.confirmed is not None) and run.summary == result.verdict.summary()
    assert run.trials == result.trials.load() and run.wall_seconds == result.wall_seconds
    assert repr(run).startswith(f"<FinishedRun {result.run_dir.name}: ")


def test_load_run_refuses_what_is_not_a_finished_run_in_one_line(tmp_path: Path) -> None:
    task = demo_task()
    model = SyntheticOracleBackend.for_task(task, _label_helps)
    run_dir = prompttune.optimize(task, optimizer="random", budget=150, backend=model, runs_dir=str(tmp_path)).run_dir
    (run_dir / "verdict.json").unlink()
    for path, says in [(tmp_path / "absent", "not a folder"), (tmp_path, "config.json missing"),
                       (run_dir, "is not a finished run")]:
        with pytest.raises(UserError, match=says) as caught:
            prompttune.load_run(path)
        assert "\n" not in str(caught.value)
