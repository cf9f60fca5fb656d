"""kill -9 at any point, then `--resume`: the same trials, shipped prompt, verdict and ledger totals as
an uninterrupted run, with nothing charged twice (synthetic oracle in a child process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prompttune.cli import main
from prompttune.commands.optimize import RunResult, resume_optimization, run_optimization
from prompttune.core.interrupt import RunInterrupted, StopRequest
from prompttune.core.storage import JsonlStorage
from tests.support import oracle_config, oracle_for

REPO = Path(__file__).resolve().parent.parent


def _signal_when(folder: Path, optimizer: str, trials: int, extra_wait: float,
                 signum: signal.Signals = signal.SIGKILL) -> tuple[Path, subprocess.Popen]:
    """Start the child run; send it `signum` once its log holds `trials` lines (plus `extra_wait` s)."""
    child = subprocess.Popen([sys.executable, "-m", "tests.resume_child", str(folder), optimizer], cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and child.poll() is None:
        logs = list(folder.glob("runs/*/trials.jsonl"))
        if logs and len(JsonlStorage(logs[0]).load()) >= trials:
            time.sleep(extra_wait)
            break
        time.sleep(0.005)
    assert child.poll() is None, "the child finished before it could be stopped"
    os.kill(child.pid, signum)
    return logs[0].parent, child


def _kill_when(folder: Path, optimizer: str, trials: int, extra_wait: float) -> Path:
    run_dir, child = _signal_when(folder, optimizer, trials, extra_wait)
    child.communicate()
    return run_dir


def _assert_same_result(run_dir: Path, resumed: RunResult, whole: RunResult) -> None:
    """Trials, shipped prompt, verdict and both ledgers' totals as in the uninterrupted run."""
    assert lines(run_dir / "trials.jsonl") == lines(whole.run_dir / "trials.jsonl")
    assert json.loads((run_dir / "best_prompt.json").read_text()) == json.loads(
        (whole.run_dir / "best_prompt.json").read_text())
    assert resumed.verdict.summary() == whole.verdict.summary()
    # Nothing charged twice: the replayed calls were charged once, exactly as the first time.
    def totals(result: RunResult) -> list[tuple[int, int, int]]:
        return [(ledger.calls, ledger.prompt_tokens, ledger.completion_tokens)
                for ledger in (result.search_ledger, result.confirm_ledger)]
    assert totals(resumed) == totals(whole)
    assert resumed.search_ledger.calls <= resumed.search_ledger.cap_calls


def lines(path: Path) -> list[dict]:
    return JsonlStorage(path).load()


@pytest.mark.parametrize("optimizer,share,extra_wait", [
    ("sh", 0.0, 0.0),       # at the first trial
    ("sh", 0.5, 0.0),       # mid-search
    ("random", 1.0, 0.15),  # after the search, during the held-out verdict
])
def test_kill_9_then_resume_gives_the_uninterrupted_result(tmp_path: Path, optimizer: str, share: float,
                                                           extra_wait: float) -> None:
    config = oracle_config(tmp_path / "whole", optimizer=optimizer)
    whole = run_optimization(config, backend=oracle_for(config))
    trials = max(1, round(share * len(JsonlStorage(whole.run_dir / "trials.jsonl").load())))
    run_dir = _kill_when(tmp_path / "killed", optimizer, trials, extra_wait)
    assert not (run_dir / "verdict.json").exists()
    resumed = resume_optimization(run_dir, backend=oracle_for(config))
    _assert_same_result(run_dir, resumed, whole)
    assert len(lines(run_dir / "trials.interrupted.jsonl")) >= trials
    assert resumed.resumed and resumed.resumed.calls_replayed > 0
    assert "Resumed after an interruption" in (run_dir / "report.md").read_text()


def test_a_torn_last_line_is_skipped_and_a_finished_run_is_not_resumed(tmp_path: Path, capsys) -> None:
    log = tmp_path / "trials.jsonl"
    log.write_text('{"number": 0}\n{"number": 1, "scor')
    assert JsonlStorage(log).load() == [{"number": 0}]
    config = oracle_config(tmp_path)
    done = run_optimization(config, backend=oracle_for(config))
    assert main(["optimize", "--resume", str(done.run_dir)]) == 2
    assert "finished already" in capsys.readouterr().err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_search_reports_the_best_so_far_then_resume_finishes_the_run(
        tmp_path: Path, signum: signal.Signals, capsys) -> None:
    config = oracle_config(tmp_path / "whole", optimizer="sh")
    whole = run_optimization(config, backend=oracle_for(config))
    trials = len(lines(whole.run_dir / "trials.jsonl")) // 2
    run_dir, child = _signal_when(tmp_path / "stopped", "sh", trials, 0.0, signum)
    _, stderr = child.communicate(timeout=120)
    # One line says how to finish the run; no traceback.
    assert child.returncode == 130 and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"interrupted: stopped by {signum.name} after the trial in flight; the report of the best candidate so far, "
        f"with its held-out verdict, is {run_dir / 'report.md'}; finish the run with `optimize --resume {run_dir}`")
    # The trial in flight was finished, the search stopped there, and the best so far was tested on test.
    stopped = lines(run_dir / "trials.jsonl")
    assert trials <= len(stopped) < len(lines(whole.run_dir / "trials.jsonl"))
    facts = json.loads((run_dir / "verdict.json").read_text())
    assert facts["status"] == "interrupted" and facts["ledgers"]["search"]["calls"] == stopped[-1]["budget_spent"]
    assert facts["ledgers"]["confirm"]["calls"] >= config.test_size
    assert "Interrupted and resumable" in (run_dir / "report.md").read_text()
    assert main(["report", str(run_dir)]) == 0
    assert "Interrupted and resumable" in (run_dir / "report.html").read_text()

    resumed = resume_optimization(run_dir, backend=oracle_for(config))
    _assert_same_result(run_dir, resumed, whole)
    assert lines(run_dir / "trials.interrupted.jsonl") == stopped
    assert json.loads((run_dir / "verdict.json").read_text())["status"] == "finished"
    assert "Interrupted" not in (run_dir / "report.md").read_text()
    assert main(["optimize", "--resume", str(run_dir)]) == 2
    assert "finished already" in capsys.readouterr().err


def test_a_second_signal_or_one_outside_the_search_stops_at_once() -> None:
    request = StopRequest("optimize --resume runs/x")
    with pytest.raises(RunInterrupted, match="stopped at once by SIGTERM.*`optimize --resume runs/x`"):
        request.handle(signal.SIGTERM, None)
    with request.during_search():
        request.handle(signal.SIGINT, None)
        assert request() and request.signal == "SIGINT"
        with pytest.raises(RunInterrupted, match="stopped at once by SIGINT"):
            request.handle(signal.SIGINT, None)
