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
from prompttune.commands.optimize import resume_optimization, run_optimization
from prompttune.core.storage import JsonlStorage
from tests.support import oracle_config, oracle_for

REPO = Path(__file__).resolve().parent.parent


def _kill_when(folder: Path, optimizer: str, trials: int, extra_wait: float) -> Path:
    """Start the child run; SIGKILL it once its log holds `trials` lines (plus `extra_wait` s)."""
    child = subprocess.Popen([sys.executable, "-m", "tests.resume_child", str(folder), optimizer], cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and child.poll() is None:
        logs = list(folder.glob("runs/*/trials.jsonl"))
        if logs and len(JsonlStorage(logs[0]).load()) >= trials:
            time.sleep(extra_wait)
            break
        time.sleep(0.005)
    assert child.poll() is None, "the child finished before it could be killed"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    return logs[0].parent


@pytest.mark.parametrize("optimizer,share,extra_wait", [
    ("sh", 0.0, 0.0),       # at the first trial
    ("sh", 0.5, 0.0),       # mid-search
    ("random", 1.0, 0.15),  # after the search, during the held-out verdict
    ("mipro", 0.5, 0.0),    # after its proposer calls
])
def test_kill_9_then_resume_gives_the_uninterrupted_result(tmp_path: Path, optimizer: str, share: float,
                                                           extra_wait: float) -> None:
    config = oracle_config(tmp_path / "whole", optimizer=optimizer)
    whole = run_optimization(config, backend=oracle_for(config))
    trials = max(1, round(share * len(JsonlStorage(whole.run_dir / "trials.jsonl").load())))
    run_dir = _kill_when(tmp_path / "killed", optimizer, trials, extra_wait)
    assert not (run_dir / "verdict.json").exists()
    resumed = resume_optimization(run_dir, backend=oracle_for(config))

    def lines(path: Path) -> list[dict]:
        return JsonlStorage(path).load()
    assert lines(run_dir / "trials.jsonl") == lines(whole.run_dir / "trials.jsonl")
    assert len(lines(run_dir / "trials.interrupted.jsonl")) >= trials
    assert json.loads((run_dir / "best_prompt.json").read_text()) == json.loads(
        (whole.run_dir / "best_prompt.json").read_text())
    assert resumed.verdict.summary() == whole.verdict.summary()
    # Nothing charged twice: the replayed calls were charged once, exactly as the first time.
    assert (resumed.search_ledger.calls, resumed.search_ledger.tokens) == (whole.search_ledger.calls,
                                                                           whole.search_ledger.tokens)
    assert resumed.search_ledger.calls <= config.budget
    assert resumed.resumed and resumed.resumed.calls_replayed > 0
    # Each kind of call (proposer calls included) replayed from the cache or made live, once.
    by_kind = resumed.search_ledger.calls_by_kind
    assert {k: by_kind[k] + by_kind[f"{k} (shared cache)"] for k in whole.search_ledger.calls_by_kind} == \
        dict(whole.search_ledger.calls_by_kind)
    if optimizer == "mipro":
        assert by_kind["propose (shared cache)"] == whole.search_ledger.calls_by_kind["propose"] > 0
    assert "Resumed after an interruption" in (run_dir / "report.md").read_text()


def test_a_torn_last_line_is_skipped_and_a_finished_run_is_not_resumed(tmp_path: Path, capsys) -> None:
    log = tmp_path / "trials.jsonl"
    log.write_text('{"number": 0}\n{"number": 1, "scor')
    assert JsonlStorage(log).load() == [{"number": 0}]
    config = oracle_config(tmp_path)
    done = run_optimization(config, backend=oracle_for(config))
    assert main(["optimize", "--resume", str(done.run_dir)]) == 2
    assert "finished already" in capsys.readouterr().err
