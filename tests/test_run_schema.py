"""One run-directory schema (`prompttune.core.run_files`): the package names run-directory files in a handful of
modules at most, and `load_run` reopens every kind of run directory the commands write."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import prompttune
from prompttune.core.errors import UserError
from prompttune.core.run_files import ARMS, SUMMARY, TRIALS, read_trials
from prompttune.results.finished_run import FinishedCompare, FinishedEvaluation
from prompttune.testing import SyntheticOracleBackend, demo_task

PACKAGE = Path(prompttune.__file__).resolve().parent
SCHEMA = PACKAGE / "core" / "run_files.py"
SCHEMA_SIBLINGS: set[Path] = set()  # modules beside the schema that may name files too: none
FILE_NAME = re.compile(r'"[a-z_]+\.(json|jsonl|md|html|txt|sqlite|png)"')
MOST_MODULES = 4  # the schema, and three that name a model folder's or a package's own file


def _label_helps(text: str) -> float:
    return 0.9 if "Label:" in text else 0.5


def modules_naming_files() -> list[str]:
    """Every module of the package with a file name as a string literal (the schema's siblings left out)."""
    return sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                  if path not in SCHEMA_SIBLINGS and FILE_NAME.search(path.read_text(encoding="utf-8")))


def test_file_names_are_string_literals_in_few_modules() -> None:
    named = modules_naming_files()
    assert str(SCHEMA.relative_to(PACKAGE)) in named, "the pattern no longer finds the schema's own names"
    assert len(named) <= MOST_MODULES, named


def test_the_count_sees_a_new_module_naming_a_file(tmp_path: Path) -> None:
    module = tmp_path / "writer.py"
    module.write_text('SUMMARY = run_dir / "summary.json"\n')
    assert FILE_NAME.search(module.read_text())


def test_reading_the_trials_leaves_the_log_untouched(tmp_path: Path) -> None:
    """A resumed comparison tells a finished arm by its trial log's mtime: reading the log must not touch it."""
    log = tmp_path / TRIALS
    log.write_text('{"trial": 0}\n{"trial": 1}\n{"tri')  # a torn last line, as a kill leaves it
    os.utime(log, ns=(0, 10**9))
    assert read_trials(tmp_path) == [{"trial": 0}, {"trial": 1}] and log.stat().st_mtime_ns == 10**9
    assert read_trials(tmp_path / "absent") == []


def test_load_run_opens_a_comparison(tmp_path: Path) -> None:
    task = demo_task()
    model = SyntheticOracleBackend.for_task(task, _label_helps)
    compared = prompttune.compare(task, optimizers=["random", "sh"], seeds=2, budget=150, backend=model,
                                  runs_dir=str(tmp_path))
    run = prompttune.load_run(compared.run_dir)
    assert isinstance(run, FinishedCompare) and run.kind == "compare" and run.run_dir == compared.run_dir
    assert (run.arms, run.seeds, run.mode) == (compared.arms, compared.seeds, compared.mode)
    assert run.config == compared.config and run.fair == all(check.ok for check in compared.checks)
    assert [(r.arm, r.seed) for r in run.runs] == sorted((r.arm, r.seed) for r in compared.runs)
    assert [r.confirmation.best_accuracy for r in sorted(run.runs, key=lambda r: (r.arm, r.seed))] == [
        r.confirmation.best_accuracy for r in sorted(compared.runs, key=lambda r: (r.arm, r.seed))]
    assert [arm["arm"] for arm in run.summary["arms"]] == ["random", "sh"]
    assert repr(run) == f"<FinishedCompare {compared.run_dir.name}: random, sh at 2 seed(s)>"

    (run.run_dir / SUMMARY).unlink()  # as a comparison stopped before its report
    with pytest.raises(UserError, match="is an unfinished comparison: `compare --resume") as caught:
        prompttune.load_run(run.run_dir)
    assert "\n" not in str(caught.value)


def test_load_run_opens_an_evaluation(tmp_path: Path) -> None:
    task = demo_task()
    model = SyntheticOracleBackend.for_task(task, _label_helps)
    evaluated = prompttune.evaluate(task, prompts=["Colour: {text}\nAnswer:", "Colour: {text}\nLabel:"],
                                    backend=model, runs_dir=str(tmp_path))
    run = prompttune.load_run(evaluated.run_dir)
    assert isinstance(run, FinishedEvaluation) and run.kind == "evaluate" and run.config == evaluated.config
    first = evaluated.settings[0]
    assert run.accuracies(first.scoring) == [score.accuracy for score in first.scores]
    assert [p["name"] for p in run.prompts] == [p.name for p in evaluated.prompts]
    assert len(run.records) == len(evaluated.settings) * len(evaluated.prompts) * len(evaluated.example_ids)
    assert run.posix == []
    assert run.summary["ledger"] == evaluated.ledger.summary()

    (run.run_dir / SUMMARY).unlink()
    with pytest.raises(UserError, match="is not a finished evaluation") as caught:
        prompttune.load_run(run.run_dir)
    assert "\n" not in str(caught.value)


def test_load_run_refuses_a_folder_of_no_kind_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / ARMS).mkdir()
    with pytest.raises(UserError, match="unfinished comparison"):
        prompttune.load_run(tmp_path)
    (tmp_path / ARMS).rmdir()
    with pytest.raises(UserError, match="not a finished run") as caught:
        prompttune.load_run(tmp_path)
    assert "\n" not in str(caught.value)
