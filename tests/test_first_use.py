"""What a new user meets right after the first run (issue 40, item 4): the README's own task without
split sizes, doubts about the data named, a quiet library that lists its API, a result that predicts,
tabulates, summarizes and displays itself, and terminals and reports that name what ran and where it went.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import prompttune
from prompttune import Task, api
from prompttune.cli import main
from prompttune.core.errors import UserError
from prompttune.engine import study
from prompttune.optimizers.proposer import usable_critique
from prompttune.testing import SyntheticOracleBackend, colours_task_file, demo_task, run_oracle
from tests.support import oracle_for

REPO = Path(__file__).resolve().parent.parent
README_TASK = REPO / "examples" / "custom_task" / "reviews_with_prompt.yaml"


def _label_helps(text: str) -> float:
    return 0.9 if "Label:" in text else 0.5


@pytest.fixture(scope="module")
def run() -> prompttune.RunResult:
    task = demo_task()
    return prompttune.optimize(task, optimizer="random", budget=300, record=False,
                               backend=SyntheticOracleBackend.for_task(task, _label_helps))


# -- the task: no split sizes needed, the split stated, a label seen once named -----------------------

def test_space_show_runs_on_the_readmes_120_row_task_without_split_sizes(capsys: pytest.CaptureFixture) -> None:
    assert main(["space", "show", "--task", str(README_TASK)]) == 0
    out = capsys.readouterr().out
    assert "valid candidates: 900" in out
    assert "task reviews: splits train 60 / dev 30 / test 30, drawn stratified from 120 rows" in out


def test_space_show_keeps_the_sizes_given(capsys: pytest.CaptureFixture) -> None:
    assert main(["space", "show", "--task", str(README_TASK), "--test-size", "100"]) == 2
    assert "cannot fill" in capsys.readouterr().err  # a size asked for is a size honoured, or refused
    assert main(["space", "show", "--task", str(README_TASK), "--train-size", "40", "--dev-size", "20",
                 "--test-size", "20"]) == 0
    assert "drawn stratified" not in capsys.readouterr().out  # sizes given: nothing to state


def test_from_records_states_the_split_it_made() -> None:
    rows = [{"text": f"item {i}", "label": ["red", "blue"][i % 2]} for i in range(40)]
    task = Task.from_records(rows, label="label", seed=3)
    assert task.split_note == ("drawn stratified from 40 rows: half train, a quarter dev, a quarter test; "
                               "split seed 3")
    assert repr(task) == ("Task('records': labels blue, red; input text; train 20 / dev 10 / test 10 "
                          f"({task.split_note}))")
    given = Task.from_records(train=rows[:20], dev=rows[20:30], test=rows[30:], label="label")
    assert given.split_note == ""  # the caller's own splits need no statement


def test_a_label_seen_in_one_row_only_is_named_with_the_label_it_looks_like() -> None:
    rows = [{"text": f"ticket {i}", "team": ["billing", "shipping"][i % 2]} for i in range(40)]
    task = Task.from_records([*rows, {"text": "ticket 99", "team": "biling"}], label="team")
    assert task.warnings == ["task 'records': label 'biling' occurs in one row only; a typo of 'billing' (20 rows)?"]
    assert Task.from_records(rows, label="team").warnings == []


def test_a_task_file_with_a_label_seen_once_warns_on_the_terminal(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = colours_task_file(tmp_path)
    (tmp_path / "colours.csv").write_text((tmp_path / "colours.csv").read_text() + "item 999 is painted gren,gren\n")
    path.write_text(path.read_text().replace("labels: {red: [red], green: [green], blue: [blue]}\n", ""))
    assert main(["space", "show", "--task", str(path)]) == 0
    assert "warning: task 'colours': label 'gren' occurs in one row only; a typo of 'green' (120 rows)?" in \
        capsys.readouterr().err


# -- the library: quiet, its API listed --------------------------------------------------------------

def test_dir_lists_the_api() -> None:
    listed = dir(prompttune)
    assert {"optimize", "evaluate", "compare", "resume", "load_run", "Task", "RunResult", "Backend"} <= set(listed)
    assert all(name in listed for name in prompttune.__all__)


@pytest.mark.integration
def test_a_library_call_on_the_real_model_prints_nothing_not_even_the_loaders_bars(tmp_path: Path) -> None:
    """The embedded model's load shows tqdm bars (GGUF conversion, weights) unless the library hides them."""
    script = f"""
import prompttune
rows = [{{"text": f"a {{w}} review number {{i}}", "label": w}} for i in range(6) for w in ("good", "bad")]
task = prompttune.Task.from_records(rows, label="label")
result = prompttune.optimize(task, optimizer="random", budget=20, runs_dir={str(tmp_path)!r})
prompttune.predict(result, "a good review number 99")  # the run closed its model: predict loads it again, quietly
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert (done.stdout, done.stderr) == ("", "")


# -- the result: predict, trials, summary, notebook display ------------------------------------------

def test_predict_gives_the_label_the_verdict_scored_for_each_test_example(run: prompttune.RunResult) -> None:
    task = demo_task()
    fields = {ex.id: ex.fields for ex in task.splits["test"]}
    records = run.verdict.records[run.verdict.shipped.id]
    assert [prompttune.predict(run, fields[r.example_id]) for r in records] == [task.labels[r.pred] for r in records]
    first = records[0]
    assert prompttune.predict(run, fields[first.example_id]["text"]) == task.labels[first.pred]  # one field: the text itself
    with pytest.raises(UserError, match="lacks the field"):
        prompttune.predict(run, {"review": "x"})


def test_predict_after_the_run_closed_its_own_backend_builds_it_again(tmp_path: Path, monkeypatch) -> None:
    built: list = []

    def build(config):
        backend = oracle_for(config)
        backend.closed = False
        backend.close = lambda: setattr(backend, "closed", True)
        built.append(backend)
        return backend
    monkeypatch.setattr(study, "build_backend", build)
    monkeypatch.setattr(api, "build_backend", build)
    path = colours_task_file(tmp_path)
    result = prompttune.optimize(str(path), optimizer="random", budget=300, train_size=60, dev_size=60,
                                 test_size=90, runs_dir=str(tmp_path / "runs"))
    assert len(built) == 1 and built[0].closed and result.backend is None  # the run closed the one it built
    record = result.verdict.records[result.verdict.shipped.id][0]
    text = {e.id: e for e in study.load_run_task(result.config).splits["test"]}[record.example_id]
    assert prompttune.predict(result, text.fields) == result.labels[record.pred]
    assert len(built) == 2 and not built[1].closed
    prompttune.predict(result, text.fields)
    assert len(built) == 2  # kept for the next call
    result.close()
    assert built[1].closed


def test_trials_table(run: prompttune.RunResult) -> None:
    rows = run.trials.load()
    table = run.trials.to_pandas()
    assert len(table) == len(rows) > 1 and "budget_spent" in table.columns


def test_summary_and_notebook_display_carry_the_accuracies_verdict_and_serving(run: prompttune.RunResult) -> None:
    c = run.confirmation
    summary = run.summary()
    assert f"baseline test accuracy: {c.baseline_accuracy:.3f}" in summary
    assert f"shipped test accuracy: {c.best_accuracy:.3f}" in summary
    assert f"verdict: {run.verdict.summary()}" in summary
    assert "serving: serving contract choice, scored by constrained decoding" in summary
    assert "splits: train 60 / dev 30 / test 30" in summary and "model: synthetic-oracle-0" in summary
    assert f"| baseline test accuracy | {c.baseline_accuracy:.3f} |" in run._repr_markdown_()
    assert "<th style='text-align:left'>verdict</th>" in run._repr_html_()
    assert repr(run).startswith("<RunResult colours · random: baseline") and len(repr(run).splitlines()) == 1


def test_summary_states_a_declared_serving_contract(run: prompttune.RunResult, monkeypatch) -> None:
    monkeypatch.setattr(run, "config", run.config.model_copy(update={"serve": "generate"}))
    assert "serving: serving contract generate, scored by generation" in run.summary()


# -- terminals and reports ---------------------------------------------------------------------------

def test_the_terminal_names_report_html_beside_report_md(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(study, "build_backend", oracle_for)
    assert main(["optimize", "--task", str(colours_task_file(tmp_path)), "--optimizer", "random", "--budget", "300",
                 "--train-size", "60", "--dev-size", "60", "--test-size", "60", "--runs-dir",
                 str(tmp_path / "runs")]) == 0
    run_dir, = (tmp_path / "runs").glob("*-colours-*")
    assert f"reports: {run_dir / 'report.md'} and {run_dir / 'report.html'}" in capsys.readouterr().out


def test_usable_critiques() -> None:
    words, instruction = ("red", "green", "blue"), "Name the colour of the item."
    assert usable_critique("Mention the colour list explicitly.", instruction, words)
    assert usable_critique("Say that crimson counts as red.", instruction, words)
    assert not usable_critique("", instruction, words)
    assert not usable_critique("Once upon a time, a king lived in a castle.", instruction, words)
    assert not usable_critique("colour", instruction, words)


def test_unusable_critiques_suggest_a_proposer_model_once(tmp_path: Path) -> None:
    empty = run_oracle("reflect", 600, proposals=lambda text: "")
    assert len(empty.result.advice) == 1 and "--proposer-model MODEL" in empty.result.advice[0]
    assert "an empty answer" in empty.result.advice[0] and empty.optimizer.moves.critiques
    assert f"note: {empty.result.advice[0]}" in empty.result.summary()
    fine = run_oracle("reflect", 600, proposals=lambda text: "Name the colour list: red, green or blue.")
    assert fine.result.advice == ()
