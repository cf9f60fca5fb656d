"""Run a protocol's headlines one after another across sittings, from one worktree: each finished headline is
skipped, an interrupted one resumed, the next one started (`benchmarks/headline.py` in the worktree does the work
and keeps the record).

Why: protocol v2's six headlines take several sittings of this machine, and each sitting must pick up exactly where
the last one stopped (a resume at the same commit, never a second start of a headline that has run). The state is
read from the worktree's run directories (`runs/*-compare/headline.json` names the headline; `summary.json` marks
it finished), so nothing else has to be remembered between sittings.

Run: python benchmarks/headline_queue.py --worktree /work/wt-v2b [--python .venv/bin/python] [--jobs 2]
     [--names sst2-choice,trec-choice,...]   # default: protocol v2's order
Interrupt as a headline: two SIGINTs to the process group; the queue stops with the headline it was running.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

V2_ORDER = ("sst2-choice", "trec-choice", "agnews-choice", "sst2-generate", "trec-generate", "agnews-generate")


def runs_of(worktree: Path) -> dict[str, list[Path]]:
    """The worktree's headline run directories by headline name, oldest first."""
    found: dict[str, list[Path]] = {}
    for record in sorted((worktree / "runs").glob("*-compare/headline.json")):
        found.setdefault(json.loads(record.read_text())["task"], []).append(record.parent)
    return found


def next_step(worktree: Path, names: list[str]) -> tuple[str, Path | None] | None:
    """(name, run directory to resume, or None to start) for the first headline of `names` not finished; None when
    every one has finished. A headline whose latest run has a summary is finished."""
    runs = runs_of(worktree)
    for name in names:
        latest = runs.get(name, [None])[-1]
        if latest is None:
            return name, None
        if not (latest / "summary.json").is_file():
            return name, latest
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worktree", type=Path, required=True, help="a clean worktree at the headlines' commit")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs headline.py")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--names", default=",".join(V2_ORDER), help="headlines in the order they run")
    args = parser.parse_args(argv)
    worktree, names = args.worktree.resolve(), args.names.split(",")
    if not (worktree / "benchmarks" / "headline.py").is_file():
        print(f"error: {worktree} holds no benchmarks/headline.py: not a prompttune worktree", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the headline takes the SIGINTs and stops; the queue follows
    env = {**os.environ, "PYTHONPATH": str(worktree)}  # the worktree's own package, as headline.py requires
    while (step := next_step(worktree, names)) is not None:
        name, run_dir = step
        what = ["--resume", str(run_dir.relative_to(worktree))] if run_dir else []
        command = [args.python, "benchmarks/headline.py", name, *what, "--jobs", str(args.jobs)]
        print(f"headline queue: {' '.join(command[1:])}", flush=True)
        done = subprocess.run(command, cwd=worktree, env=env,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        if done.returncode != 0 or next_step(worktree, names) == step:
            print(f"headline queue: {name} ended with exit status {done.returncode}; the queue stops", flush=True)
            return done.returncode or 1
    print("headline queue: every headline has finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
