"""The summary of `benchmarks/gpu_check.sh check`: which steps finished and which were cut, the
throughput table's prompts/s, and the optimize runs' calls/s as a fraction of them.

The check rewrites it after every step, so a run stopped anywhere still says how far it got. It reads
only text files (no torch, no prompttune import), so it costs nothing next to the steps.

Run: python benchmarks/gpu_check_summary.py WORK_DIR SUMMARY_FILE  (WORK_DIR holds steps.txt, weights,
runs/c and runs/d; the step logs are read beside SUMMARY_FILE)
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROW = re.compile(r"^(score \d+-demo|generate \d+ tok)\s+(full|reuse)\s+([\d.]+)\s")
AGREE_COLUMN = 88  # throughput.py's rows: the reuse-vs-full agreement starts here
VERDICT_LINE = re.compile(r"^serve \w+, verdict scored by [^:]+: (baseline test accuracy .*)$")  # optimize's last line
TABLE_HEAD = re.compile(r"^\S+ torch\.(\w+), ")
DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
OPTIMIZE_STEPS = {"c_optimize_2k": "c", "d_optimize_40k": "d"}


@dataclass(frozen=True)
class Throughput:
    dtype: str
    workload: str
    path: str
    prompts_per_second: float
    agreement: str


def throughput_rows(log: Path) -> list[Throughput]:
    """Rows of every throughput table in the log, each tagged with its table's dtype."""
    rows: list[Throughput] = []
    dtype = "?"
    for line in log.read_text(errors="replace").splitlines() if log.is_file() else []:
        if head := TABLE_HEAD.match(line):
            dtype = DTYPES.get(head.group(1), head.group(1))
        elif row := ROW.match(line):
            agree = line[AGREE_COLUMN:].strip() if row.group(2) == "reuse" else ""
            rows.append(Throughput(dtype, row.group(1), row.group(2), float(row.group(3)), agree))
    return rows


@dataclass(frozen=True)
class RunProgress:
    dtype: str
    calls: int
    search_seconds: float
    wall_seconds: float | None
    outcome: str
    use: dict | None = None  # verdict.json's backend_use: seconds scoring, generating and in the engine


def run_progress(runs: Path, log: Path) -> RunProgress | None:
    """Calls charged so far (the last trial's budget_spent) and the seconds from the run directory's
    creation (after the model loaded) to the last trial written: a cut run's partial progress."""
    run_dirs = sorted(p for p in runs.glob("*/") if (p / "config.json").is_file()) if runs.is_dir() else []
    if not run_dirs:
        return None
    run = run_dirs[-1]
    trials = run / "trials.jsonl"
    lines = trials.read_text().splitlines() if trials.is_file() else []
    calls = max((json.loads(line).get("budget_spent", 0) for line in lines if line.strip()), default=0)
    seconds = trials.stat().st_mtime - (run / "config.json").stat().st_mtime if lines else 0.0
    verdict = run / "verdict.json"
    saved = json.loads(verdict.read_text()) if verdict.is_file() else {}
    wall, use = saved.get("wall_seconds"), saved.get("backend_use")
    text = log.read_text(errors="replace") if log.is_file() else ""
    loaded = re.search(r"TransformersBackend: \S+\|(\w+)", text)
    outcome = next((found.group(1) for line in reversed(text.splitlines()) if (found := VERDICT_LINE.match(line))),
                   "no verdict (stopped before the held-out test)")
    return RunProgress(DTYPES.get(loaded.group(1), loaded.group(1)) if loaded else "?", calls, seconds, wall, outcome,
                       use)


def summary(work: Path, out: Path) -> list[str]:
    weights = (work / "weights").read_text().strip() if (work / "weights").is_file() else "unknown"
    lines = [f"weights: {weights}" + ("" if weights == "real" else
                                       "  (RANDOM: accuracies mean nothing; throughput and calls/s still hold)")]
    lines.append("steps (name, status, exit code, seconds, command):")
    steps = (work / "steps.txt").read_text().splitlines() if (work / "steps.txt").is_file() else []
    lines += [f"  {step}" for step in steps] or ["  none finished yet (see setup.log)"]
    rows = throughput_rows(out / "a_throughput.log")
    lines.append("throughput (prompts/s; reuse vs full: max |log-prob diff| or same text):")
    lines += [f"  {r.dtype:<5}{r.workload:<16}{r.path:<7}{r.prompts_per_second:>10.1f}"
              f"{'  vs full: ' + r.agreement if r.agreement else ''}" for r in rows] or ["  no rows"]
    for step, letter in OPTIMIZE_STEPS.items():
        progress = run_progress(work / "runs" / letter, out / f"{step}.log")
        if progress is None:
            lines.append(f"{step}: no run directory")
            continue
        rate = progress.calls / progress.search_seconds if progress.search_seconds > 0 else 0.0
        wall = f", run wall {progress.wall_seconds:.0f} s" if progress.wall_seconds is not None else ""
        if (use := progress.use) is not None:
            wall += (f" (scoring {use['scoring_seconds']:.0f} s, generating {use['generation_seconds']:.0f} s, engine "
                     f"{use['engine_seconds']:.0f} s, {use['calls']} backend calls)")
        lines.append(f"{step} ({progress.dtype}): {progress.calls} calls in {progress.search_seconds:.0f} s of search "
                     f"= {rate:.1f} calls/s{wall}; {progress.outcome}")
        for r in rows:
            if r.dtype == progress.dtype and r.workload.startswith("score") and rate:
                lines.append(f"  = {rate / r.prompts_per_second:.1%} of {r.dtype} {r.workload} {r.path} "
                             f"({r.prompts_per_second:.0f} prompts/s)")
    return lines


def main() -> None:
    work, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.write_text("\n".join(summary(work, out.parent)) + "\n")


if __name__ == "__main__":
    main()
