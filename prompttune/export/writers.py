"""The formats `prompttune export` writes the shipped prompt in, and the export itself (the json and
openai-chat data are built in `prompttune.results.prompt_formats`; this module writes them and the rest).

- `text` (prompt.txt): the exact prompt the model was scored on, with `{field}` where each input
  goes (fill it by plain replacement: demo texts may contain braces, so not with str.format).
- `json` (prompt.json): the same template plus everything needed to use it as a classifier —
  label words, the continuations that were scored, how the label is read, demos with ids, and
  the full PromptSpec.
- `openai-chat` (prompt.openai-chat.json): the prompt as chat messages with `{field}`
  placeholders, the assistant prefix, label words and how the label is read, for a production
  chat-completions client; `evaluate --prompts` scores it again (an `export:` entry).
- `dspy` (program.json + program.py): a `dspy.Predict` state in DSPy's own save format, with the
  winning instruction and demos, a loader (`from program import load`), and `PromptAdapter`,
  which sends the confirmed prompt's messages instead of DSPy's own format and reads the label
  from the answer as prompttune does; program.py's docstring says what DSPy does not reproduce.
  Only for a prompt the verdict scored by generation: DSPy reads generated text, so a run that
  read label log-probabilities (with or without offsets) is refused in one line.
- `python` (classifier.py): one standard-library module, `classify(text_fields) -> label`, that
  calls an OpenAI-compatible server exactly as the verdict scored (`served_classifier.py` is its
  code; the run's prompt, label words, offsets or token limit fill in its CONTRACT).

Every export states the serving contract (`serving_contract`: logprobs, generate or choice);
openai-chat also carries the request parameters the verdict's reading needs, a paragraph on
applying them, and, under `choice`, the choice list with `logit_bias` values where they
reproduce the offsets exactly.

A shipped prompt that carries `calibrate` (contextual calibration of the label scores) says so in
every format: text writes calibration.txt beside prompt.txt, json and openai-chat hold a
`calibration` block with the content-free inputs and prompts production scores to get the bias
(the run's records keep calibrated scores only, so the bias itself cannot be recovered from
them), and program.py states that DSPy applies none. One that carries `label_bias` (batch
calibration) holds the offsets themselves in that block and in calibration.txt: they are part of the
prompt, fixed when the optimizer made it.
"""

from __future__ import annotations

import inspect
import json
import pprint
import re
import textwrap
from pathlib import Path
from typing import Any

from prompttune.backends import openai_chat as chat
from prompttune.backends.backend import apply_chat_template
from prompttune.backends.openai_chat import wire_messages
from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.run_files import (
    CALIBRATION_NOTE,
    EXPORT_DSPY,
    EXPORT_DSPY_LOADER,
    EXPORT_JSON,
    EXPORT_OPENAI_CHAT,
    EXPORT_PYTHON,
    EXPORT_TEXT,
    SERVING_NOTE,
    read_prompt,
)
from prompttune.core.types import Example, Prompt
from prompttune.results.prompt_formats import (
    OFFSETS,
    as_json,
    as_openai_chat,
    as_text,
    batch_calibrated,
    calibrated,
    chat_messages,
    constrained_decoding,
    content_free_prompts,
    filled,
    input_fields,
    prediction,
    run_tokenizer,
    serving_contract,
    template,
)
from prompttune.results.run_record import read_run_config
from prompttune.scoring import contract, extraction
from prompttune.scoring.evaluator import COT_MAX_NEW_TOKENS, MAX_NEW_TOKENS
from prompttune.scoring.prediction import CONTENT_FREE
from prompttune.search_spaces.prompt import PromptSpec
from prompttune.tasks import load_run_task

FORMATS = ("text", "json", "openai-chat", "dspy", "python")
PYTHON_FORMAT = "prompttune-python/1"
_SLOT = re.compile("\x00([^\x00]*)\x00")  # an input field's place in a rendered template


def write_serving_note(spec: PromptSpec, config: RunConfig, out: Path) -> Path:
    """serving.txt beside prompt.txt: the contract the verdict confirmed the prompt under, and how the label is read."""
    serve = serving_contract(config)
    if prediction(spec, config) == "generation":
        limit = contract.GENERATION.cot_max_tokens if spec.cot else contract.GENERATION.max_tokens
        reading = (f"Decode greedily (temperature {contract.GENERATION.temperature:g}) for at most {limit} tokens; "
                   f"the label is {contract.GENERATION.extraction}.")
    else:
        reading = ("The label is the label word whose first answer token has the largest log-probability"
                   + (", after the offsets in calibration.txt." if calibrated(spec, config) else "; no offsets."))
    (out / SERVING_NOTE).write_text(f"Serving contract: serve {serve} ({contract.WORDS[serve]}). The held-out test "
                                    f"confirmed this prompt scored that way. {reading}\n", encoding="utf-8")
    return out / SERVING_NOTE


def write_calibration_note(spec: PromptSpec, config: RunConfig, demos: list[Example], out: Path) -> Path:
    """calibration.txt beside prompt.txt: the text export's word that the prompt ships calibrated."""
    if batch_calibrated(spec, config):
        offsets = ", ".join(f"{word} {bias:+.4f}" for word, bias in zip(spec.label_words, spec.label_bias))
        (out / CALIBRATION_NOTE).write_text(
            "The shipped prompt is batch-calibrated (Zhou et al. 2024): normalise its label log-probabilities "
            f"over the labels, subtract these offsets, then take the largest: {offsets}.\n", encoding="utf-8")
        return out / CALIBRATION_NOTE
    probes = "\n\n".join(f"--- content-free input {value!r} ---\n{as_text(p)}"
                         for value, p in zip(CONTENT_FREE, content_free_prompts(spec, demos)))
    (out / CALIBRATION_NOTE).write_text(
        "The shipped prompt is calibrated (contextual calibration, Zhao et al. 2021): its label probabilities, "
        "normalised over the labels, are divided by a bias and normalised again before the largest is taken. "
        "The run's records keep calibrated scores only, so the bias is not exported: score the prompts below "
        "once on the production model; the bias is the mean of their label probabilities, each normalised "
        f"over the labels.\n\n{probes}\n", encoding="utf-8")
    return out / CALIBRATION_NOTE


LOADER = '''"""DSPy program exported by prompttune from {run}.

    import dspy
    from program import load
    dspy.configure(lm=dspy.LM(...))          # the model the run chose this prompt for
    classify = load()
    classify(**{{"{first}": "..."}}).label     # a label word, or None when the answer names none or several

`load()` gives a `dspy.Predict` with the winning instruction and demos (program.json, DSPy's save
format) that answers through `PromptAdapter`. DSPy's own ChatAdapter would send its
`[[ ## field ## ]]` sections, so the field names, separators and label words the search chose
would never reach the model; the adapter sends MESSAGES, the run's confirmed prompt with each
input in place of its `{{field}}`, and reads the label from the answer as prompttune does.

What DSPy does not reproduce:
{drops}
"""

import re
from pathlib import Path
from typing import Any, Literal, Sequence

import dspy

INPUT_FIELDS = {inputs!r}
LABELS = {labels!r}
MESSAGES = {messages}
INSTRUCTIONS = {instructions!r}
DEMOS = {n_demos}
MAX_NEW_TOKENS = {max_new_tokens}
COT = {cot}
_PLACEHOLDER = re.compile("|".join(re.escape("{{" + name + "}}") for name in INPUT_FIELDS))
FINAL_ANSWER = re.compile({final_answer!r}, re.IGNORECASE)


{extract_label}

class PromptAdapter(dspy.Adapter):
    """Sends MESSAGES with the inputs filled in (one pass, so an input holding another's placeholder
    stays as it is) and parses the answer to a label word."""

    def __call__(self, lm: Any, lm_kwargs: dict[str, Any], signature: Any, demos: list, inputs: dict[str, Any]) -> Any:
        if signature.instructions != INSTRUCTIONS or len(demos) != DEMOS:
            raise ValueError("PromptAdapter sends the exported prompt, whose instruction and demos this program "
                             "no longer has: re-export the prompt, or use DSPy's own adapter")
        return super().__call__(lm, {{"temperature": 0.0, "max_tokens": MAX_NEW_TOKENS, **lm_kwargs}}, signature,
                                demos, inputs)

    def format(self, signature: Any, demos: list, inputs: dict[str, Any]) -> list[dict[str, str]]:
        def value(found: re.Match) -> str:
            return str(inputs[found.group()[1:-1]])

        return [{{"role": m["role"], "content": _PLACEHOLDER.sub(value, m["content"])}} for m in MESSAGES]

    def parse(self, signature: Any, completion: str) -> dict[str, Any]:
        label = extract_label(completion, LABELS, cot=COT)
        return {{"label": None if label is None else LABELS[label]}}


class ExportedPredict(dspy.Predict):
    def forward(self, **kwargs: Any) -> Any:
        with dspy.context(adapter=PromptAdapter()):
            return super().forward(**kwargs)


def load(path: str | Path = Path(__file__).with_name("{program}")) -> dspy.Predict:
    fields = {{name: (str, dspy.InputField()) for name in INPUT_FIELDS}}
    fields["label"] = (Literal[LABELS], dspy.OutputField())
    program = ExportedPredict(dspy.make_signature(fields, "", "Classify"))
    program.load(str(path))
    return program
'''


def _dspy_drops() -> str:
    """program.py's plain statement of what DSPy loses from the run's prompt and reading."""
    drops = ["- The messages are those prompttune's --api chat sends to a server that does not continue an "
             "assistant message: a text prompt is one user message (the model's chat template wraps it), and an "
             "assistant prefix ends the last message after a newline. A run scored over /v1/completions or in "
             "process saw the text itself, or the prefix inside the assistant turn.",
             "- DSPy optimizers that change the instruction or demos cannot change what PromptAdapter sends: it "
             "refuses a program whose instruction or demo count differs from the export."]
    return "\n".join(textwrap.fill(drop, 100, subsequent_indent="  ") for drop in drops)


def write_dspy(spec: PromptSpec, demos: list[Example], config: RunConfig, run_dir: Path, out: Path) -> list[Path]:
    from prompttune.dspy_bridge import require_dspy

    if prediction(spec, config) != "generation":
        raise UserError(f"export --to dspy: DSPy reads the label from generated text, so it cannot run this contract "
                        f"({serving_contract(config)}: label log-probabilities{OFFSETS[prediction(spec, config)]}); "
                        "use --to python (a module that scores as the run did) or --to openai-chat")
    require_dspy("export --to dspy")
    from prompttune.dspy_bridge.program import ProgramMapping

    names = input_fields(spec)
    program = ProgramMapping.build(spec, names, demos, []).program(spec, demos)
    program.save(str(out / EXPORT_DSPY))
    prompt = template(spec, demos)
    messages = wire_messages(prompt, prefill=False)
    (out / EXPORT_DSPY_LOADER).write_text(LOADER.format(
        run=run_dir, program=EXPORT_DSPY, first=names[0], inputs=tuple(names), labels=tuple(spec.label_words),
        messages=pprint.pformat(messages, width=110, sort_dicts=False),
        instructions=program.signature.instructions, n_demos=len(demos),
        max_new_tokens=COT_MAX_NEW_TOKENS if spec.cot else MAX_NEW_TOKENS, cot=spec.cot,
        final_answer=extraction.FINAL_ANSWER.pattern,
        extract_label=inspect.getsource(extraction.extract_label), drops=_dspy_drops()))
    return [out / EXPORT_DSPY, out / EXPORT_DSPY_LOADER]


def load_winner(run_dir: Path) -> tuple[PromptSpec, RunConfig]:
    """The chosen PromptSpec and the run's configuration, from a run directory."""
    config = read_run_config(run_dir)
    return PromptSpec.from_dict(read_prompt(run_dir, "shipped")["spec"]), config


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


def _slotted(spec: PromptSpec, demos: list[Example]) -> Prompt:
    """The prompt rendered with a marker in each input's place, which `_segments` splits at."""
    return filled(spec, demos, {name: f"\x00{name}\x00" for name in input_fields(spec)})


def _segments(text: str) -> list[list[str]]:
    """Marked text as `["text", literal]` and `["field", name]` parts, filled in one pass by the module."""
    parts = _SLOT.split(text)
    return [["field", part] if i % 2 else ["text", part] for i, part in enumerate(parts) if i % 2 or part]


def python_contract(spec: PromptSpec, demos: list[Example], config: RunConfig, run_dir: Path) -> dict[str, Any]:
    """What the exported module needs to score as the verdict did: the prompt for either endpoint (input slots
    marked), the label continuations and their first tokens, and how a label is read from the server."""
    prompt = _slotted(spec, demos)
    method = prediction(spec, config)
    over_chat = not (config.backend == "openai" and config.api == "completions")
    tokenizer = run_tokenizer(config) if prompt.messages is not None or (over_chat and method != "generation") else None
    if prompt.messages is None:
        completions_text: list[list[str]] | None = _segments(prompt.text or "")
    else:
        completions_text = _segments(apply_chat_template(tokenizer, prompt)) if tokenizer is not None else None
    labels = sorted({form for c in prompt.label_continuations for form in (c, c.lstrip())})
    firsts = dict(zip(labels, chat.first_tokens(tokenizer, labels))) if tokenizer is not None else None
    return {"format": PYTHON_FORMAT, "source_run": str(run_dir), "task": config.task,
            "serve": serving_contract(config), "predict": method, "cot": spec.cot,
            "model": None if config.model.startswith("embedded:") else config.model,
            "scored_with": {"backend": config.backend, "api": config.api if config.backend == "openai" else None},
            "base_url": config.base_url[0] if config.backend == "openai" and config.base_url else None,
            "api": config.api if config.backend == "openai" else "auto", "api_key_env": config.api_key_env,
            "input_fields": input_fields(spec), "label_words": list(spec.label_words),
            "continuations": list(prompt.label_continuations), "text_prompt": prompt.messages is None,
            "completions_text": completions_text,
            "messages": [{"role": m["role"], "content": _segments(m["content"])} for m in chat_messages(prompt)],
            "assistant_prefix": prompt.assistant_prefix, "first_tokens": firsts,
            "max_tokens": (COT_MAX_NEW_TOKENS if spec.cot else MAX_NEW_TOKENS) if method == "generation" else None,
            "label_bias": list(spec.label_bias) if method == "batch_calibration" else None,
            "content_free_inputs": list(CONTENT_FREE) if method == "contextual_calibration" else [],
            "constrained": constrained_decoding(spec, config, prompt.label_continuations)
            if serving_contract(config) == "choice" else None}


def _module_docstring(contract: dict[str, Any], spec: PromptSpec, name: str) -> str:
    """The exported module's statement of its contract: what it sends, how it reads the label, when it refuses."""
    method = contract["predict"]
    example = ", ".join(f'"{name}": "..."' for name in contract["input_fields"])
    endpoint = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}.get(
        contract["api"], "/v1/completions where the server offers it, else /v1/chat/completions (the run's --api auto)")
    if method == "generation":
        after = " after the last 'Final answer'" if spec.cot else ""
        read = (f"the server answers greedily (temperature 0, at most {contract['max_tokens']} tokens) and the label "
                f"is the one label word found{after} as a whole word, ignoring case; an answer naming none or "
                "several gives None, which the run's verdict counted wrong.")
    else:
        read = ("each label's log-probability right after the prompt comes from the server's log-probs as "
                "prompttune's openai backend reads them (a start-up probe picks how: echoed prompt log-probs; a "
                "walk through top-20 next-token log-probs, which scores multi-token labels; or, over "
                "/v1/chat/completions, each label's first token in the answer's first-token top_logprobs)")
        if method == "batch_calibration":
            offsets = ", ".join(f"{w} {b:+.4f}" for w, b in zip(spec.label_words, spec.label_bias))
            read += (f"; normalised over the labels, less the shipped offsets ({offsets}), as batch calibration "
                     "did in the run")
        elif method == "contextual_calibration":
            read += ("; normalised over the labels and divided by the prompt's bias: the mean normalised label "
                     "probabilities over the content-free inputs 'N/A', '' and '[MASK]', scored once per server on "
                     "first use (contextual calibration, as in the run)")
        read += "; the label is the largest."
    scored = contract["scored_with"]
    where = ([] if scored["backend"] == "openai" else
             [f"The run scored in process ({scored['backend']} backend): a server running the same model gives its "
              "labels up to that server's numerics."])
    contract_text = (f"Serving contract: {contract['serve']}. The rendered prompt (demos included), each input in "
                     f"its place, goes to {endpoint}; {read} Over /v1/chat/completions a label whose first token "
                     "is not in the answer's top_logprobs, or two labels sharing one, raises ContractError, as the "
                     "run refused them; a server giving no log-probs raises it for label scoring.")
    usage = (f"    from {name} import classify\n"
             f'    classify({{{example}}}, base_url="http://127.0.0.1:8000/v1")  # a label word\n'
             f"    python {name}.py --base-url URL < inputs.jsonl  # one {{\"label\": ...}} line per input\n")
    text = (f"Classifier exported by prompttune from {contract['source_run']} (task {contract['task']}): the "
            "shipped prompt, served exactly as the run's verdict scored it.\n\n" + usage + "\n"
            + "\n\n".join(textwrap.fill(paragraph, 100) for paragraph in [contract_text, *where, (
                "The server defaults to $PROMPTTUNE_BASE_URL, else the run's; the model to the run's, else the "
                "server's only one. Standard library only.")]) + "\n")
    return '"""' + text.replace("\\", "\\\\").replace('"""', '\\"""') + '"""\n'


def python_module(spec: PromptSpec, demos: list[Example], config: RunConfig, run_dir: Path, name: str) -> str:
    """The source of `classifier.py`: served_classifier.py's code with its contract, its helpers
    (served_helpers.py) and the label extraction filled in."""
    contract = python_contract(spec, demos, config, run_dir)
    body = (Path(__file__).with_name("served_classifier.py").read_text(encoding="utf-8")).split('"""', 2)[2]
    extraction_code = (f"FINAL_ANSWER = re.compile({extraction.FINAL_ANSWER.pattern!r}, re.IGNORECASE)\n\n\n"
                       + inspect.getsource(extraction.extract_label))
    body = body.replace(_EXTRACTION_IMPORT, extraction_code, 1)
    helpers = Path(__file__).with_name("served_helpers.py").read_text(encoding="utf-8")
    helpers_code = helpers[helpers.index(_HELPERS_START) + len(_HELPERS_START):].lstrip("\n") + "\n\n"
    import_start = body.index("from prompttune.export.served_helpers import (")
    body = body[:import_start] + helpers_code + body[body.index(")\n", import_start) + 2:]
    body = body.replace(_EMPTY_CONTRACT, "CONTRACT: dict[str, Any] = " + pprint.pformat(
        contract, width=110, sort_dicts=False) + "\n", 1)
    return _module_docstring(contract, spec, name) + body


_EXTRACTION_IMPORT = ("from prompttune.scoring.extraction import extract_label  "
                      "# replaced by that code on export\n")
_EMPTY_CONTRACT = "CONTRACT: dict[str, Any] = {}  # replaced by the run's contract on export\n"
_HELPERS_START = "from typing import Any, Sequence\n"  # served_helpers.py's last import: its code follows


def _write_json(path: Path, data: dict[str, Any]) -> list[Path]:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return [path]


def export(run_dir: Path, to: str, out: Path) -> list[Path]:
    """Write the winner of `run_dir` in format `to` under `out`; returns the files written."""
    if to not in FORMATS:
        raise UserError(f"unknown export format {to!r}; choose from {', '.join(FORMATS)}")
    spec, config = load_winner(run_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"--output {out} is a file; name a folder (it is created if missing)")
    demos = demo_examples(spec, config)
    out.mkdir(parents=True, exist_ok=True)
    if to == "text":
        (out / EXPORT_TEXT).write_text(as_text(template(spec, demos)) + "\n", encoding="utf-8")
        note = [write_calibration_note(spec, config, demos, out)] if calibrated(spec, config) else []
        return [out / EXPORT_TEXT, write_serving_note(spec, config, out), *note]
    if to == "json":
        return _write_json(out / EXPORT_JSON, as_json(spec, demos, config, run_dir))
    if to == "openai-chat":
        return _write_json(out / EXPORT_OPENAI_CHAT, as_openai_chat(spec, demos, config, run_dir))
    if to == "python":
        module = Path(EXPORT_PYTHON).stem
        (out / EXPORT_PYTHON).write_text(python_module(spec, demos, config, run_dir, module), encoding="utf-8")
        return [out / EXPORT_PYTHON]
    return write_dspy(spec, demos, config, run_dir, out)
