"""The formats `prompttune export` writes the shipped prompt in.

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

from dataclasses import asdict
from pathlib import Path
from typing import Any

from prompttune.core.config import RunConfig
from prompttune.core.types import Example, Prompt
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


def as_json(spec: PromptSpec, demos: list[Example], config: RunConfig, run_dir: Path) -> dict[str, Any]:
    prompt = template(spec, demos)
    shape = ({"text": prompt.text} if prompt.messages is None else
             {"messages": [{"role": r, "content": c} for r, c in prompt.messages],
              "assistant_prefix": prompt.assistant_prefix})
    return {"format": FORMAT, "source_run": str(run_dir), "task": config.task, "model": config.model,
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
