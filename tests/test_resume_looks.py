"""The test split's looks across resumes (engine.verdicts): a run whose final look is recorded keeps that decision
however often it is resumed and stopped, and the looks registry counts decisions, not resumes (synthetic oracle,
in this process)."""

from __future__ import annotations

import json
import signal
from dataclasses import asdict
from pathlib import Path

import pytest

import prompttune
from prompttune.core.interrupt import RunInterrupted
from prompttune.core.run_files import TEST_LOOKS, VERDICT_REGISTRY, run_status
from prompttune.core.storage import JsonlStorage
from prompttune.engine import record_step
from prompttune.engine.study import resume_study, run_study
from prompttune.engine.verdicts import Look, served_decisions
from tests.support import oracle_config, oracle_for


def _signal_after_trials(monkeypatch: pytest.MonkeyPatch, trials: int, signum: signal.Signals) -> None:
    """Send this process `signum` once the trial log holds `trials` lines, as a user pressing Ctrl-C mid-search (a
    resume replays its search from the cache, so a backend would never see the moment)."""
    append = JsonlStorage.append

    def append_then_signal(storage: JsonlStorage, trial: dict) -> None:
        append(storage, trial)
        if len(storage.load()) == trials:
            signal.raise_signal(signum)
    monkeypatch.setattr(JsonlStorage, "append", append_then_signal)


def _registry(runs_dir: Path) -> list[dict]:
    return JsonlStorage(runs_dir / VERDICT_REGISTRY).load()


def _shipped(run_dir: Path) -> str:
    """The candidate best_prompt.json ships."""
    return json.loads((run_dir / "best_prompt.json").read_text())["candidate_id"]


@pytest.mark.parametrize("writing", ["write_report", "write_page"])  # before verdict.json, after it
def test_a_decided_run_stopped_again_mid_search_keeps_its_one_recorded_decision(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writing: str) -> None:
    """Finish → stopped while its report is written → resume stopped mid-search → resume: one final look, one
    registry line, and the prompt that look confirmed shipped at every stage (never the baseline of a look at α = 0)."""
    config = oracle_config(tmp_path / "whole", optimizer="sh")
    whole = run_study(config, backend=oracle_for(config))
    confirmed, trials = whole.verdict.shipped.id, len(JsonlStorage(whole.run_dir / "trials.jsonl").load())
    assert whole.verdict.confirmed is not None and confirmed != whole.baseline.id

    stopped = oracle_config(tmp_path / "stopped", optimizer="sh")
    runs_dir = Path(stopped.runs_dir)
    with monkeypatch.context() as patched:
        patched.setattr(record_step, writing, lambda *args: signal.raise_signal(signal.SIGTERM))
        with pytest.raises(RunInterrupted, match="stopped at once by SIGTERM"):
            run_study(stopped, backend=oracle_for(stopped), handle_signals=True)
    run_dir = next(path for path in runs_dir.iterdir() if path.is_dir())
    assert [look["kind"] for look in _registry(runs_dir)] == ["final"] and _shipped(run_dir) == confirmed

    with monkeypatch.context() as patched:
        _signal_after_trials(patched, trials // 2, signal.SIGINT)
        with pytest.raises(RunInterrupted) as stop:
            resume_study(run_dir, backend=oracle_for(config), handle_signals=True)
    assert run_status(run_dir) == "interrupted"
    assert [look["kind"] for look in _registry(runs_dir)] == ["final"]
    assert [look["kind"] for look in json.loads((run_dir / TEST_LOOKS).read_text())] == ["final"]
    assert _shipped(run_dir) == confirmed
    assert "final held-out verdict is recorded and stands" in str(stop.value)

    resumed = resume_study(run_dir, backend=oracle_for(config))
    assert run_status(run_dir) == "finished" and resumed.test_looks == 1
    assert resumed.verdict.alpha == config.alpha and resumed.verdict.shipped.id == confirmed
    assert [look["kind"] for look in _registry(runs_dir)] == ["final"] and _shipped(run_dir) == confirmed
    assert prompttune.load_run(run_dir).shipped.id == confirmed


def test_an_interim_look_and_the_final_look_of_its_resume_are_one_decision(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Interrupted mid-search (interim look at α/2), resumed to its end (final look at α/2): the test split served
    one decision, so no multiple-looks warning; another run on the same split is a second decision."""
    config = oracle_config(tmp_path, optimizer="sh")
    runs_dir = Path(config.runs_dir)
    with monkeypatch.context() as patched:
        _signal_after_trials(patched, 3, signal.SIGINT)
        with pytest.raises(RunInterrupted, match="stopped by SIGINT after the trial in flight"):
            run_study(config, backend=oracle_for(config), handle_signals=True)
    run_dir = next(path for path in runs_dir.iterdir() if path.is_dir())
    resumed = resume_study(run_dir, backend=oracle_for(config))
    assert [look["kind"] for look in _registry(runs_dir)] == ["interim", "final"]  # every look is logged
    assert resumed.verdict.alpha == pytest.approx(config.alpha / 2) and resumed.test_looks == 1
    report = (run_dir / "report.md").read_text()
    assert "up to 2·α" not in report and "first verdict recorded on this test split" in report
    assert json.loads((run_dir / "verdict.json").read_text())["verdict"]["test_split_verdicts"] == 1

    another = run_study(config.model_copy(update={"seed": 1}), backend=oracle_for(config))
    assert another.test_looks == 2 and "up to 2·α" in (another.run_dir / "report.md").read_text()


def test_the_registry_counts_runs_however_their_looks_and_paths_were_written(tmp_path: Path) -> None:
    """An older release's registry (a decided run's extra interim look at α = 0) and a resume that spelled the run's
    path otherwise still count one decision per run; another split's looks are not counted."""
    def log(run_dir: str, kind: str, alpha: float, test_hash: str = "split") -> None:
        with open(tmp_path / VERDICT_REGISTRY, "a", encoding="utf-8") as registry:
            registry.write(json.dumps(asdict(Look(run_dir, "colours", 0, 90, test_hash, kind, alpha, "", "", 0.0)))
                           + "\n")
    log("runs/a", "final", 0.05)
    log("/home/me/runs/a/", "interim", 0.0)  # the look a resume of the decided run made before it was fixed
    log("runs/b", "interim", 0.025)
    log("runs/c", "final", 0.05, test_hash="another split")
    log("./runs/b", "final", 0.025)
    assert served_decisions(tmp_path, Look("runs/b", "colours", 0, 90, "split", "final", 0.025, "", "", 0.0)) == 2
