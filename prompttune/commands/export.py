"""`prompttune export RUN_DIR --to text|json|dspy`: the prompt a run ships, for use elsewhere (the
formats are described in `export_formats`)."""

from __future__ import annotations

import argparse
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from prompttune.commands.common import load_run_task, read_run_config
from prompttune.commands.export_formats import as_json, as_text, template, write_dspy
from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.storage import read_json
from prompttune.core.types import Example
from prompttune.search_spaces.prompt import PromptSpec


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def load_winner(run_dir: Path) -> tuple[PromptSpec, RunConfig]:
    """The chosen PromptSpec and the run's configuration, from a run directory."""
    config = read_run_config(run_dir)
    best = read_json(run_dir / "best_prompt.json")
    if not isinstance(best, dict) or not isinstance(best.get("spec"), dict):
        raise UserError(f"{run_dir / 'best_prompt.json'} holds no prompt spec; was it written by optimize?")
    known = {f.name for f in fields(PromptSpec)}
    return PromptSpec(**{k: _tuples(v) for k, v in best["spec"].items() if k in known}), config


def demo_examples(spec: PromptSpec, config: RunConfig) -> list[Example]:
    """The spec's demos, from the same train split the run drew (same data, sizes and split seed)."""
    if not spec.demo_ids:
        return []
    task = load_run_task(config)
    train = {ex.id: ex for ex in task.splits["train"]}
    missing = [i for i in spec.demo_ids if i not in train]
    if missing:
        raise UserError(f"demo examples {', '.join(missing)} not found in the task's train split; "
                        f"is the data where the run found it?")
    return [train[i] for i in spec.demo_ids]


def export(run_dir: Path, to: str, out: Path) -> list[Path]:
    """Write the winner of `run_dir` in format `to` under `out`; returns the files written."""
    spec, config = load_winner(run_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"--output {out} is a file; name a folder (it is created if missing)")
    demos = demo_examples(spec, config)
    out.mkdir(parents=True, exist_ok=True)
    if to == "text":
        (out / "prompt.txt").write_text(as_text(template(spec, demos)) + "\n", encoding="utf-8")
        return [out / "prompt.txt"]
    if to == "json":
        (out / "prompt.json").write_text(json.dumps(as_json(spec, demos, config, run_dir), indent=2,
                                                    ensure_ascii=False), encoding="utf-8")
        return [out / "prompt.json"]
    return write_dspy(spec, demos, run_dir, out)


def _export(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    written = export(run_dir, args.to, Path(args.output) if args.output else run_dir / "export")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register `export` on the `prompttune` sub-command parser."""
    parser = commands.add_parser("export", help="write a run's winning prompt as text, JSON or a DSPy program")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="an optimize run directory (or a compare arm's)")
    parser.add_argument("--to", required=True, choices=["text", "json", "dspy"], help="output format")
    parser.add_argument("--output", metavar="DIR", help="output folder (default: RUN_DIR/export)")
    parser.set_defaults(handler=_export)
