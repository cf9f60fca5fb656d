"""The headline queue picks up across sittings: a finished headline is skipped, an interrupted one resumed in its
run directory, the next one started; a headline that stops (interrupted, failed) stops the queue."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.headline_queue import main, next_step

FAKE_HEADLINE = '''
import json, os, sys, time
from pathlib import Path
args = sys.argv[1:]
with open("calls.log", "a") as log:
    log.write(" ".join(args) + "\\n")
name = args[0]
if os.environ.get("STOP_AT") == name:
    sys.exit(130)
run = Path(args[2]) if args[1] == "--resume" else Path("runs") / f"{time.time_ns()}-compare"
run.mkdir(parents=True, exist_ok=True)
(run / "headline.json").write_text(json.dumps({"task": name}))
(run / "summary.json").write_text("{}")
'''


def _worktree(tmp_path: Path) -> Path:
    worktree = tmp_path / "wt"
    (worktree / "benchmarks").mkdir(parents=True)
    (worktree / "benchmarks" / "headline.py").write_text(FAKE_HEADLINE)
    finished = worktree / "runs" / "1-compare"
    finished.mkdir(parents=True)
    (finished / "headline.json").write_text(json.dumps({"task": "a"}))
    (finished / "summary.json").write_text("{}")
    interrupted = worktree / "runs" / "2-compare"
    interrupted.mkdir()
    (interrupted / "headline.json").write_text(json.dumps({"task": "b"}))
    return worktree


def test_the_queue_skips_the_finished_resumes_the_interrupted_and_starts_the_next(tmp_path: Path) -> None:
    worktree = _worktree(tmp_path)
    assert next_step(worktree, ["a", "b", "c"]) == ("b", worktree / "runs" / "2-compare")
    assert main(["--worktree", str(worktree), "--python", sys.executable, "--names", "a,b,c"]) == 0
    calls = (worktree / "calls.log").read_text().splitlines()
    assert calls == ["b --resume runs/2-compare --jobs 2", "c --jobs 2"]
    assert next_step(worktree, ["a", "b", "c"]) is None


def test_a_headline_that_stops_stops_the_queue(tmp_path: Path, monkeypatch) -> None:
    worktree = _worktree(tmp_path)
    monkeypatch.setenv("STOP_AT", "c")
    assert main(["--worktree", str(worktree), "--python", sys.executable, "--names", "a,b,c,d"]) == 130
    assert [line.split()[0] for line in (worktree / "calls.log").read_text().splitlines()] == ["b", "c"]
    assert main(["--worktree", str(tmp_path / "nowhere")]) == 2
