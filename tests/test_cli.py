"""The command-line boundary: option listings, and unexpected failures ending in one line that names
the log holding the traceback (bad input itself is the table in test_bad_input.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import prompttune
from prompttune.cli import main
from prompttune.dspy_bridge import DSPY_ARMS
from prompttune.engine import comparison, study
from prompttune.optimizers import OPTIMIZERS, registry
from prompttune.testing import colours_task_file
from tests.support import oracle_for


def test_help_options_lists_every_option_with_its_default(capsys) -> None:
    assert main(["optimize", "--optimizer", "cople", "--help-options"]) == 0
    out = capsys.readouterr().out
    for line in ("m (int, default 10)", "C (int, default 8)", "rewrite (bool, default False)",
                 "synonyms (str, default 'wordnet')"):
        assert line in out


def test_help_options_names_the_allowed_values_and_covers_the_dspy_arms(capsys) -> None:
    assert main(["optimize", "--optimizer", "reflect", "--help-options"]) == 0
    out = capsys.readouterr().out
    assert "race_score (one of margin, probability, tiebreak, objective, staged, default 'tiebreak')" in out
    assert "parents (int | None, default unset): " in out and "Unset: 4 where the backend" in out
    pytest.importorskip("dspy")
    assert main(["optimize", "--optimizer", "dspy-gepa", "--help-options"]) == 0
    assert "reflection_minibatch_size (int, default 3)" in capsys.readouterr().out


def _optimize(tmp_path: Path) -> int:
    return main(["optimize", "--task", str(colours_task_file(tmp_path)), "--budget", "300", "--train-size", "60",
                 "--dev-size", "60", "--test-size", "60", "--runs-dir", str(tmp_path / "runs")])


def _log_named_by_the_last_line(capsys: pytest.CaptureFixture) -> Path:
    """stderr ends in one line naming the log (the progress shown before it stays); no traceback shows."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: unexpected RuntimeError: disk on fire; the traceback is in "), err
    assert err.count("error:") == 1
    return Path(last.rsplit(" ", 1)[1])


def test_a_crash_in_a_run_leaves_its_traceback_in_the_run_directory(capsys, tmp_path: Path, monkeypatch) -> None:
    def crash(*args, **kwargs):
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.setattr(study, "build_backend", oracle_for)
    monkeypatch.setattr(registry, "run_search", crash)
    assert _optimize(tmp_path) == 1
    log = _log_named_by_the_last_line(capsys)
    run_dir, = (tmp_path / "runs").iterdir()
    assert log == run_dir / "error.log"
    assert "Traceback" in log.read_text() and "in crash" in log.read_text()


def test_a_crash_before_any_run_directory_leaves_its_traceback_in_a_temp_file(capsys, tmp_path: Path,
                                                                              monkeypatch) -> None:
    def crash(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(study, "load_run_task", crash)
    assert _optimize(tmp_path) == 1
    log = _log_named_by_the_last_line(capsys)
    try:
        assert not (tmp_path / "runs").exists()
        assert "Traceback" in log.read_text() and "in crash" in log.read_text()
    finally:
        log.unlink()


def test_version_answers_on_the_command_and_its_aliases(capsys) -> None:
    for argv in (["--version"], ["optimize", "--version"], ["compare", "--version"], ["evaluate", "--version"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0 and capsys.readouterr().out == f"prompttune {prompttune.__version__}\n"


def test_optimize_help_shows_every_default_and_the_optimizer_names(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["optimize", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # unwrapped
    for shown in ("default: 2000", "default: agnews", "draw (default: 0)", "default: 1000", "default: 300", "default: 8",
                  "default: 60.0", "default: 4", "default: auto", "default: reflect", "default: 0.05"):
        assert shown in out
    assert all(name in out for name in (*OPTIMIZERS, *DSPY_ARMS))


def test_compare_alpha_reaches_every_arms_verdict(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(comparison, "build_backend", oracle_for)
    assert main(["compare", "--task", str(colours_task_file(tmp_path)), "--optimizers", "random,sh", "--seeds", "1",
                 "--budget", "300", "--train-size", "60", "--dev-size", "60", "--test-size", "90", "--alpha", "0.01",
                 "--runs-dir", str(tmp_path / "runs")]) == 0
    arms = sorted((tmp_path / "runs").glob("*/arms/*/arm.json"))
    assert len(arms) == 2
    for arm in arms:
        assert json.loads((arm.parent / "config.json").read_text())["alpha"] == 0.01
        assert "α = 0.01" in arm.read_text()  # the verdict itself was taken at that level
