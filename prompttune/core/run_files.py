"""The run directory's schema: the name and format of every file `optimize`, `compare` and `evaluate` leave (and
the headline benchmark adds), so that the engine writing them and the pages, resume, export, the fairness checks,
`load_run` and the benchmarks reading them agree on one layout. Standard library only and in the bottom layer, so
that core's trial log and interruption marker, the DSPy bridge and a benchmark that loads no model all name their
files from here.

Every kind: config.json (what was asked; written atomically when the run opens), code.jsonl (the code of each
session), cache.sqlite (every paid call, unless --cache names a shared file), report.md and report.html.

- optimize: trials.jsonl (one line per trial; trials.interrupted.jsonl holds an interrupted session's), the
  shipped, dev-winner and baseline prompts (best_prompt, dev_winner, baseline_prompt: a .json record and the
  .txt the model saw), leaders.jsonl, test_looks.json, test_records.jsonl, prompt_tokens.png, a DSPy arm's
  dspy_program.json and dspy.log, interruption.json while a session stopped resumably, and verdict.json
  (the facts) last: it alone marks the run finished. The runs directory logs every look in test_verdicts.jsonl.
- compare: arms/ (one optimize run per arm and seed, with arm.json once that arm-seed finished), anytime.png,
  report.md, and summary.json, which marks the comparison finished.
- evaluate: prompts.jsonl, records.jsonl, posix.jsonl (with --posix), summary.json, accuracy.png.
- headline (benchmarks/headline.py): a comparison whose headline.json holds its provenance.

An export folder (`prompttune export`, `RunResult.save`) holds the names at the end.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Literal

from prompttune.core.errors import UserError
from prompttune.core.storage import JsonlStorage, read_trial_log, write_atomic

RunKind = Literal["optimize", "compare", "evaluate"]
PromptRole = Literal["shipped", "dev_winner", "baseline"]

CONFIG = "config.json"
CODE = "code.jsonl"
CACHE = "cache.sqlite"
REPORT = "report.md"
PAGE = "report.html"

TRIALS = "trials.jsonl"
TRIALS_SET_ASIDE = "trials.interrupted.jsonl"
PROMPT_STEMS: dict[PromptRole, str] = {"shipped": "best_prompt", "dev_winner": "dev_winner",
                                       "baseline": "baseline_prompt"}
LEADERS = "leaders.jsonl"
TEST_LOOKS = "test_looks.json"
VERDICT_REGISTRY = "test_verdicts.jsonl"  # in the runs directory, beside the runs
TEST_RECORDS = "test_records.jsonl"
TOKENS_PLOT = "prompt_tokens.png"
DSPY_PROGRAM = "dspy_program.json"
DSPY_LOG = "dspy.log"
INTERRUPTION = "interruption.json"
FACTS = "verdict.json"

ARMS = "arms"
ARM = "arm.json"
ANYTIME_PLOT = "anytime.png"
SUMMARY = "summary.json"

PROMPTS = "prompts.jsonl"
RECORDS = "records.jsonl"
POSIX = "posix.jsonl"
ACCURACY_PLOT = "accuracy.png"

HEADLINE = "headline.json"

EXPORT_TEXT = "prompt.txt"
EXPORT_JSON = "prompt.json"
EXPORT_OPENAI_CHAT = "prompt.openai-chat.json"
EXPORT_PYTHON = "classifier.py"
EXPORT_DSPY = "program.json"
EXPORT_DSPY_LOADER = "program.py"
SERVING_NOTE = "serving.txt"
CALIBRATION_NOTE = "calibration.txt"


def _parsed(path: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None


def read_json(path: Path) -> Any:
    """A run directory's JSON file; a missing or broken one is the user's error, in one line."""
    try:
        return _parsed(path, path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path.parent} lacks {path.name}: not a complete run directory") from None


def read_jsonl(path: Path) -> list[dict]:
    """A run directory's JSON-lines file; a missing or broken one is the user's error, in one line."""
    if not path.is_file():
        raise UserError(f"{path.parent} lacks {path.name}: not a complete run directory")
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON lines ({exc.msg})") from None


def _json(data: Any, ascii: bool) -> str:
    return json.dumps(data, indent=2, ensure_ascii=ascii)


def _write_lines(path: Path, rows: Iterable[dict], ascii: bool) -> None:
    """One JSON line per row, streamed to a file beside `path` and renamed over it (never half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=ascii) + "\n")
    os.replace(tmp, path)


# -- what every kind holds --------------------------------------------------------------------------

def run_kind(run_dir: Path) -> RunKind | None:
    """The command that wrote `run_dir`, told apart by a file only it writes (a comparison also by its arms
    before it finished); None where there is none of them."""
    if (run_dir / PROMPTS).is_file():
        return "evaluate"
    if (run_dir / TRIALS).is_file():
        return "optimize"
    if (run_dir / SUMMARY).is_file() or (run_dir / ARMS).is_dir():
        return "compare"
    return None


def config_text(run_dir: Path) -> str:
    """config.json as written; a path that is no run directory is one line naming what is missing."""
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a run directory (not a folder)")
    path = run_dir / CONFIG
    if not path.is_file():
        raise UserError(f"{run_dir} is not a run directory: {CONFIG} missing")
    return path.read_text(encoding="utf-8")


def read_config(run_dir: Path) -> dict[str, Any]:
    """config.json as a dict (each command's own fields: the pages and the benchmarks read it as written)."""
    return _parsed(run_dir / CONFIG, config_text(run_dir))


def write_config(run_dir: Path, settings: str) -> None:
    """Atomic: a kill leaves the old config or the new, so a resume never reads a torn one."""
    write_atomic(run_dir / CONFIG, settings)


def write_report(run_dir: Path, text: str) -> None:
    write_atomic(run_dir / REPORT, text)


def write_page(run_dir: Path, html: str) -> Path:
    write_atomic(run_dir / PAGE, html)
    return run_dir / PAGE


# -- optimize ---------------------------------------------------------------------------------------

def run_status(run_dir: Path) -> Literal["finished", "interrupted"] | None:
    """An optimize run's state: interrupted (a signal or an outage stopped a session; interruption.json says
    why, and a resume finishes the run); finished (verdict.json written, no interruption pending);
    or None (neither: running, or killed outright; a resume finishes it too)."""
    if (run_dir / INTERRUPTION).is_file():
        return "interrupted"
    return "finished" if (run_dir / FACTS).is_file() else None


def trial_log(run_dir: Path) -> JsonlStorage:
    return JsonlStorage(run_dir / TRIALS)


def read_trials(run_dir: Path) -> list[dict]:
    """Every trial logged (none before the search wrote one), the log left untouched (a finished arm's mtime is
    how a resumed comparison is seen not to have run it again); a torn last line is skipped."""
    return read_trial_log(run_dir / TRIALS) if (run_dir / TRIALS).is_file() else []


def set_aside_trials(run_dir: Path) -> int:
    """Move an interrupted run's trials.jsonl to trials.interrupted.jsonl, so that the rerun or replay
    writes trials.jsonl anew; return how many trials it held."""
    if not (run_dir / TRIALS).is_file():
        return 0
    trials = len(read_trial_log(run_dir / TRIALS))
    os.replace(run_dir / TRIALS, run_dir / TRIALS_SET_ASIDE)
    return trials


def prompt_file(run_dir: Path, role: PromptRole, suffix: Literal[".json", ".txt"] = ".json") -> Path:
    return run_dir / f"{PROMPT_STEMS[role]}{suffix}"


def write_prompt(run_dir: Path, role: PromptRole, record: dict[str, Any], text: str) -> None:
    """The prompt's record (.json: id, spec, dimensions, diff) and the prompt as the model saw it (.txt)."""
    write_atomic(prompt_file(run_dir, role), _json(record, ascii=False))
    write_atomic(prompt_file(run_dir, role, ".txt"), text + "\n")


def read_prompt(run_dir: Path, role: PromptRole) -> dict[str, Any]:
    """A prompt's record; one that holds no prompt spec is one line."""
    record = read_json(prompt_file(run_dir, role))
    if not isinstance(record, dict) or not isinstance(record.get("spec"), dict):
        raise UserError(f"{prompt_file(run_dir, role)} holds no prompt spec; was it written by optimize?")
    return record


def prompt_text(run_dir: Path, role: PromptRole) -> str:
    """The prompt exactly as the model saw it on one test example."""
    return prompt_file(run_dir, role, ".txt").read_text(encoding="utf-8").rstrip("\n")


def write_leaders(run_dir: Path, leaders: Iterable[dict]) -> None:
    _write_lines(run_dir / LEADERS, leaders, ascii=True)


def read_leaders(run_dir: Path) -> list[dict]:
    return read_jsonl(run_dir / LEADERS)


def read_looks(run_dir: Path) -> list[dict]:
    """The looks at its test split this run recorded (none yet: [])."""
    return read_json(run_dir / TEST_LOOKS) if (run_dir / TEST_LOOKS).is_file() else []


def write_looks(run_dir: Path, looks: list[dict]) -> None:
    write_atomic(run_dir / TEST_LOOKS, _json(looks, ascii=True))


def log_verdict(runs_dir: Path, look: dict) -> None:
    """Append a look to the runs directory's registry (one line each, never rewritten)."""
    with open(runs_dir / VERDICT_REGISTRY, "a", encoding="utf-8") as log:
        log.write(json.dumps(look) + "\n")


def read_verdict_registry(runs_dir: Path) -> list[dict]:
    return read_jsonl(runs_dir / VERDICT_REGISTRY)


def write_test_records(run_dir: Path, rows: Iterable[dict]) -> None:
    _write_lines(run_dir / TEST_RECORDS, rows, ascii=False)


def read_test_records(run_dir: Path) -> list[dict]:
    return read_jsonl(run_dir / TEST_RECORDS)


def write_facts(run_dir: Path, facts: dict[str, Any]) -> None:
    """verdict.json: written last, because it alone marks the run finished."""
    write_atomic(run_dir / FACTS, _json(facts, ascii=False))


def read_facts(run_dir: Path) -> dict[str, Any]:
    return read_json(run_dir / FACTS)


# -- compare ----------------------------------------------------------------------------------------

def finished_arms(run_dir: Path) -> list[Path]:
    """The directory of every arm-seed that finished (its arm.json written), in name order."""
    return sorted(path.parent for path in (run_dir / ARMS).glob(f"*/{ARM}"))


def write_compare_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    write_atomic(run_dir / SUMMARY, _json(summary, ascii=True))


def read_summary(run_dir: Path) -> dict[str, Any]:
    """A comparison's or an evaluation's summary.json."""
    return read_json(run_dir / SUMMARY)


# -- evaluate ---------------------------------------------------------------------------------------

def write_evaluation(run_dir: Path, prompts: Iterable[dict], records: Iterable[dict], posix: Iterable[dict] | None,
                     summary: dict[str, Any]) -> None:
    """Every prompt with its results, every scored record, POSIX per example (when measured), and the summary."""
    _write_lines(run_dir / PROMPTS, prompts, ascii=False)
    _write_lines(run_dir / RECORDS, records, ascii=False)
    if posix is not None:
        _write_lines(run_dir / POSIX, posix, ascii=False)
    write_atomic(run_dir / SUMMARY, _json(summary, ascii=False))


# -- headline ---------------------------------------------------------------------------------------

def write_headline(run_dir: Path, record: dict[str, Any]) -> None:
    write_atomic(run_dir / HEADLINE, _json(record, ascii=True) + "\n")


def read_headline(run_dir: Path) -> dict[str, Any] | None:
    """The headline benchmark's provenance record; None in a comparison that script did not start."""
    return read_json(run_dir / HEADLINE) if (run_dir / HEADLINE).is_file() else None
