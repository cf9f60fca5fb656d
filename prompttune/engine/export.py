"""The formats `prompttune export` writes the shipped prompt in, and the export itself.

- `text` (prompt.txt): the exact prompt the model was scored on, with `{field}` where each input
  goes (fill it by plain replacement: demo texts may contain braces, so not with str.format).
- `json` (prompt.json): the same template plus everything needed to use it as a classifier —
  label words, the continuations that were scored, demos with ids, and the full PromptSpec.
- `dspy` (program.json + program.py): a `dspy.Predict` state in DSPy's own save format, with the
  winning instruction and demos, and a loader (`from program import load`). DSPy renders it with
  its own adapter on whatever LM it is given, so it carries the prompt's content, not
  prompttune's exact text; use `text`/`json` to reproduce the scored prompt byte for byte.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.storage import read_json
from prompttune.core.types import Example, Prompt
from prompttune.engine.setup import load_run_task, read_run_config
from prompttune.search_spaces.prompt import PromptSpec, render

FORMAT = "prompttune-prompt/1"


def input_fields(spec: PromptSpec) -> list[str]:
    return list(dict.fromkeys(name for name, _ in spec.passage_templates + spec.input_templates))


def template(spec: PromptSpec, demos: list[Example]) -> Prompt:
    """The rendered prompt with `{field}` in place of each input value."""
    placeholder = Example("{input}", {name: f"{{{name}}}" for name in input_fields(spec)}, 0)
    return render(spec, placeholder, demos)


def as_text(prompt: Prompt) -> str:
    if prompt.messages is None:
        return prompt.text or ""
    turns = [f"[{role}]\n{content}" for role, content in prompt.messages]
    return "\n\n".join(turns + [f"[assistant]\n{prompt.assistant_prefix}"])


def as_json(spec: PromptSpec, demos: list[Example], config: RunConfig, run_dir: Path | None) -> dict[str, Any]:
    prompt = template(spec, demos)
    shape = ({"text": prompt.text} if prompt.messages is None else
             {"messages": [{"role": r, "content": c} for r, c in prompt.messages],
              "assistant_prefix": prompt.assistant_prefix})
    return {"format": FORMAT, "source_run": str(run_dir) if run_dir else None, "task": config.task, "model": config.model,
            "scoring": config.scoring, "input_fields": input_fields(spec), "template": shape,
            "label_words": list(spec.label_words), "continuations": list(prompt.label_continuations),
            "demos": [{"id": ex.id, "fields": ex.fields, "label": spec.label_words[ex.label]} for ex in demos],
            "spec": asdict(spec)}


LOADER = '''"""DSPy program exported by prompttune from {run}.

    from program import load
    classify = load()            # a dspy.Predict with the winning instruction and demos
    classify(**{{"{first}": "..."}}).label
"""

from pathlib import Path
from typing import Literal

import dspy

INPUT_FIELDS = {inputs!r}
LABELS = {labels!r}


def load(path: str | Path = Path(__file__).with_name("program.json")) -> dspy.Predict:
    fields = {{name: (str, dspy.InputField()) for name in INPUT_FIELDS}}
    fields["label"] = (Literal[LABELS], dspy.OutputField())
    program = dspy.Predict(dspy.make_signature(fields, "", "Classify"))
    program.load(str(path))
    return program
'''


def write_dspy(spec: PromptSpec, demos: list[Example], run_dir: Path, out: Path) -> list[Path]:
    from prompttune.dspy_bridge import require_dspy

    require_dspy("export --to dspy")
    from prompttune.dspy_bridge.program import ProgramMapping

    names = input_fields(spec)
    mapping = ProgramMapping.build(spec, names, demos, [])
    mapping.program(spec, demos).save(str(out / "program.json"))
    (out / "program.py").write_text(LOADER.format(run=run_dir, first=names[0], inputs=tuple(names),
                                                  labels=tuple(spec.label_words)))
    return [out / "program.json", out / "program.py"]


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
