"""export: a run's winning prompt as text, JSON, chat messages (scored again by evaluate) and a
loadable DSPy program, whose adapter sends the run's prompt (checked on the embedded model)."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import asdict
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from rich.console import Console

from prompttune.backends.factory import build_backend
from prompttune.backends.transformers_setup import EMBEDDED_MODEL
from prompttune.core.errors import UserError
from prompttune.core.types import Example
from prompttune.engine.evaluate import run_evaluation
from prompttune.engine.study import run_study
from prompttune.export import writers as export_module
from prompttune.export.writers import export
from prompttune.results import prompt_formats
from prompttune.results.evaluate import EvaluateConfig
from prompttune.results.prompt_formats import template
from prompttune.results.run_record import read_run_config
from prompttune.scoring.cache import ResultCache
from prompttune.scoring.evaluator import Evaluator
from prompttune.scoring.ledger import BudgetLedger
from prompttune.scoring.prompt_sources import exported_spec, load_prompts_file
from prompttune.search_spaces import default_space
from prompttune.search_spaces.prompt import PromptSpec, render
from tests.llama_server import llama_server  # noqa: F401  (session fixture)
from tests.support import oracle_config, oracle_for, task_of


def _run_dir(tmp_path: Path, **config_changes) -> tuple[Path, PromptSpec, list]:
    """A run directory as `optimize` leaves it: config.json and best_prompt.json with two demos."""
    declared = {} if {"serve", "scoring"} & set(config_changes) else {"serve": "logprobs"}  # what these exports state
    config = oracle_config(tmp_path, **declared, **config_changes)
    task = task_of(config)
    demos = task.splits["train"][:2]
    spec = default_space(task).default_candidate().spec.with_updates(demo_ids=tuple(e.id for e in demos))
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(config.model_dump_json())
    (run / "best_prompt.json").write_text(json.dumps({"candidate_id": "x", "spec": asdict(spec)}))
    return run, spec, demos


def test_text_export_is_the_scored_prompt_with_a_placeholder(tmp_path: Path) -> None:
    run, spec, demos = _run_dir(tmp_path)
    path, serving = export(run, "text", tmp_path / "out")
    text = path.read_text()
    assert serving.name == "serving.txt" and "Serving contract: serve logprobs" in serving.read_text()
    query = task_of(oracle_config(tmp_path)).splits["dev"][0]
    assert text.rstrip("\n").replace("{text}", query.fields["text"]) == render(spec, query, demos).text
    assert all(d.fields["text"] in text for d in demos)


def test_json_export_has_what_a_classifier_needs(tmp_path: Path) -> None:
    run, spec, demos = _run_dir(tmp_path)
    data = json.loads(export(run, "json", tmp_path / "out")[0].read_text())
    assert data["format"] == "prompttune-prompt/1" and data["input_fields"] == ["text"]
    assert data["label_words"] == list(spec.label_words) and len(data["continuations"]) == 3
    assert [d["id"] for d in data["demos"]] == [d.id for d in demos]
    assert "{text}" in data["template"]["text"] and data["spec"]["demo_ids"] == list(spec.demo_ids)


def _load_program(path: Path) -> ModuleType:
    loader = importlib.util.spec_from_file_location("exported_program", path)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


def test_dspy_export_loads_as_a_dspy_program(tmp_path: Path) -> None:
    pytest.importorskip("dspy")
    run, spec, demos = _run_dir(tmp_path, scoring="generate")
    program = _load_program(export(run, "dspy", tmp_path / "out")[1]).load()
    assert program.signature.instructions == spec.instruction.replace("{labels}", "red, green, blue")
    assert [d["text"] for d in program.demos] == [d.fields["text"] for d in demos]
    assert [d["label"] for d in program.demos] == [spec.label_words[d.label] for d in demos]


def _chat_run_dir(tmp_path: Path, **config_changes) -> tuple[Path, PromptSpec, list]:
    """A run directory whose shipped prompt is chat messages: system prompt, demos, an assistant
    prefix, and contextual calibration."""
    run, spec, demos = _run_dir(tmp_path, **config_changes)
    spec = spec.with_updates(chat=True, system="Be brief.", calibrate=True)
    (run / "best_prompt.json").write_text(json.dumps({"candidate_id": "x", "spec": asdict(spec)}))
    return run, spec, demos


@pytest.mark.parametrize("chat", [False, True])
def test_openai_chat_export_renders_as_the_run_prompt(tmp_path: Path, chat: bool) -> None:
    run, spec, demos = _chat_run_dir(tmp_path) if chat else _run_dir(tmp_path)
    data = json.loads(export(run, "openai-chat", tmp_path / "out")[0].read_text())
    assert data["format"] == "prompttune-openai-chat/1" and data["chat"] is chat
    assert data["label_words"] == list(spec.label_words) and data["answer"]["method"] == "label_logprobs"
    if chat:
        assert [m["role"] for m in data["messages"]] == ["system", "user"] and data["assistant_prefix"] == "Answer:"
    else:
        assert [m["role"] for m in data["messages"]] == ["user"] and data["assistant_prefix"] == ""
    assert data["messages"][-1]["content"].count("{text}") == 1
    task = task_of(oracle_config(tmp_path))
    again = exported_spec(data, task)
    assert again.calibrate is chat
    for example in task.splits["dev"][:3]:  # every example, and the content-free probes calibration scores
        assert render(again, example, []) == render(spec, example, demos)
    free = Example("content-free:N/A", {"text": "N/A"}, -1)
    assert render(again, free, []) == render(spec, free, demos)


def test_a_calibrated_prompt_says_so_in_every_export(tmp_path: Path) -> None:
    run, spec, demos = _chat_run_dir(tmp_path)
    out = tmp_path / "out"
    written = export(run, "text", out)
    assert [p.name for p in written] == ["prompt.txt", "serving.txt", "calibration.txt"]
    assert "calibrated" in written[2].read_text() and "[user]\n" in written[2].read_text()
    assert "after the offsets in calibration.txt" in written[1].read_text()
    for to, name in (("json", "prompt.json"), ("openai-chat", "prompt.openai-chat.json")):
        data = json.loads(export(run, to, out)[0].read_text())
        block = data["calibration"]
        assert data["calibrate"] is True and block["content_free_inputs"] == ["N/A", "", "[MASK]"]
        assert block["bias"] is None and "not in the run's records" in block["bias_from"]
        assert len(block["content_free_prompts"]) == 3, name
    chat_probe = json.loads((out / "prompt.openai-chat.json").read_text())["calibration"]["content_free_prompts"][0]
    assert chat_probe["messages"][-1]["content"].endswith("Input: N/A")
    with pytest.raises(UserError, match=r"cannot run this contract \(logprobs: label log-probabilities with "
                                         r"contextual calibration\); use --to python"):
        export(run, "dspy", out)  # DSPy reads generated text: no label scores to calibrate
    run, _, _ = _run_dir(tmp_path / "plain")
    assert [p.name for p in export(run, "text", tmp_path / "plain-out")] == ["prompt.txt", "serving.txt"]
    assert json.loads(export(run, "json", tmp_path / "plain-out")[0].read_text())["calibration"] is None


def test_a_batch_calibrated_prompt_exports_its_offsets_and_evaluate_reads_them_back(tmp_path: Path) -> None:
    run, spec, demos = _run_dir(tmp_path)
    spec = spec.with_updates(label_bias=(-0.5, -1.25, -1.75))
    (run / "best_prompt.json").write_text(json.dumps({"candidate_id": "x", "spec": asdict(spec)}))
    out = tmp_path / "out"
    written = export(run, "text", out)
    assert [p.name for p in written] == ["prompt.txt", "serving.txt", "calibration.txt"]
    assert "batch-calibrated" in written[2].read_text() and "-1.2500" in written[2].read_text()
    for to in ("json", "openai-chat"):
        data = json.loads(export(run, to, out)[0].read_text())
        assert data["calibrate"] is True and data["calibration"]["bias"] == [-0.5, -1.25, -1.75]
        assert data["calibration"]["method"].startswith("batch calibration")
    again = exported_spec(data, task_of(oracle_config(tmp_path)))
    assert again.label_bias == spec.label_bias and not again.calibrate  # offsets, not content-free probes


def test_a_shipped_prompt_exported_to_openai_chat_scores_its_test_accuracy_again(tmp_path: Path) -> None:
    config = oracle_config(tmp_path)
    backend = oracle_for(config)
    result = run_study(config, backend=backend, console=Console(quiet=True))
    run = result.run_dir
    shipped = result.verdict.shipped.id
    rows = [json.loads(line) for line in (run / "test_records.jsonl").read_text().splitlines()]
    [path] = export(run, "openai-chat", run / "export")
    relative = path.relative_to(tmp_path)  # export paths are relative to the prompts file
    prompts = tmp_path / "prompts.yaml"
    prompts.write_text(f"prompts:\n  - {{name: shipped, export: {relative}}}\n  - 'Item: {{text}}\\nColour:'\n")
    evaluation = run_evaluation(EvaluateConfig(task=config.task, prompts=str(prompts), train_size=config.train_size,
                                               dev_size=config.dev_size, test_size=config.test_size,
                                               split_seed=config.split_seed, runs_dir=str(tmp_path / "eval")),
                                backend=backend)
    records = evaluation.settings[0].records[0]
    assert evaluation.prompts[0].source == f"export {relative}"
    assert [r.pred for r in records] == [row["pred"][shipped] for row in rows]
    assert evaluation.settings[0].scores[0].accuracy == sum(row["pred"][shipped] == row["gold"] for row in rows) / len(rows)


def test_the_openai_chat_export_carries_the_contract_and_the_request_that_reads_it(tmp_path: Path) -> None:
    run, spec, _ = _run_dir(tmp_path)
    spec = spec.with_updates(label_bias=(-0.5, -1.25, -1.75))
    (run / "best_prompt.json").write_text(json.dumps({"candidate_id": "x", "spec": asdict(spec)}))
    data = json.loads(export(run, "openai-chat", tmp_path / "out")[0].read_text())
    assert data["serve"] == "logprobs" and "choice" not in data
    assert data["request"] == {"temperature": 0.0, "max_tokens": 1, "logprobs": True, "top_logprobs": 20}
    assert "subtract `calibration.bias`" in data["how_to_apply"] and "refuse the input" in data["how_to_apply"]
    assert json.loads(export(run, "json", tmp_path / "out")[0].read_text())["serve"] == "logprobs"
    generated, _, _ = _run_dir(tmp_path / "generated", scoring="generate")
    data = json.loads(export(generated, "openai-chat", tmp_path / "generated-out")[0].read_text())
    assert data["serve"] == "generate" and data["request"] == {"temperature": 0.0, "max_tokens": 16}
    assert "apply no offsets" in data["how_to_apply"] and data["calibration"] is None


@pytest.mark.parametrize("label_words,bias,logit_bias", [
    (("red", "green", "blue"), (-0.5, -1.25, -1.75), "one per label"),
    (("reddish", "greenish", "blueish"), (-0.5, -1.25, -1.75), "one per label"),  # several tokens, first ones distinct
    (("red", "green", "blue"), (), {}),
    (("red", "reddish", "redder"), (-0.5, -1.25, -1.75), None),  # one first token: no logit_bias tells them apart
])
def test_a_choice_export_carries_the_choices_logit_bias_and_each_servers_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, label_words: tuple, bias: tuple, logit_bias: object) -> None:
    for module in (export_module, prompt_formats):  # the formats and the writers both read the contract
        monkeypatch.setattr(module, "serving_contract", lambda config: "choice")
    run, spec, _ = _run_dir(tmp_path)
    spec = spec.with_updates(label_words=label_words, label_bias=bias)
    (run / "best_prompt.json").write_text(json.dumps({"candidate_id": "x", "spec": asdict(spec)}))
    data = json.loads(export(run, "openai-chat", tmp_path / "out")[0].read_text())
    choice = data["choice"]
    assert data["serve"] == "choice" and "`choice.requests`" in data["how_to_apply"]
    continuations = list(template(spec, []).label_continuations)
    assert choice["choices"] == continuations and choice["label_words"] == list(label_words)
    assert choice["grammar"] == "root ::= " + " | ".join(json.dumps(c) for c in continuations)
    requests = choice["requests"]
    assert requests["vllm"]["structured_outputs"] == {"choice": continuations}
    assert requests["openai"]["response_format"]["json_schema"]["schema"]["enum"] == list(label_words)
    if logit_bias == "one per label":
        tokenizer = prompt_formats.run_tokenizer(read_run_config(run))
        ids = [str(tokenizer(c, add_special_tokens=False).input_ids[0]) for c in continuations]
        mean = sum(bias) / len(bias)
        assert choice["logit_bias"] == dict(zip(ids, [round(mean - b, 6) for b in bias]))
        assert requests["llama.cpp"]["logit_bias"] == requests["vllm"]["logit_bias"] == choice["logit_bias"]
    else:
        assert choice["logit_bias"] == logit_bias and choice["logit_bias_note"]
        assert "logit_bias" not in requests["llama.cpp"]


@pytest.mark.parametrize("entry,message", [
    ("{name: s, export: missing.json}", "prompt 's': exported prompt .*missing.json not found"),
    ("{name: s, export: bad.json}", r"prompt 's': not an openai-chat export \(format: "),
    ("{name: s, template: 'A {text}', export: bad.json}", "prompt 's': give either template or export"),
])
def test_a_bad_export_entry_is_a_one_line_error(tmp_path: Path, entry: str, message: str) -> None:
    (tmp_path / "bad.json").write_text('{"format": "prompttune-prompt/1"}')
    (tmp_path / "prompts.yaml").write_text(f"prompts:\n  - {entry}\n  - 'B {{text}}'\n")
    with pytest.raises(UserError, match=message) as raised:
        load_prompts_file(tmp_path / "prompts.yaml", task_of(oracle_config(tmp_path)))
    assert "\n" not in str(raised.value)


class ChatServerEngine:
    """A DSPy 3.4 LM engine that posts each request, as DSPy built it, to a server's
    /v1/chat/completions (greedy, at the request's token limit), and keeps the messages it sent."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sent: list[list[dict[str, str]]] = []

    def complete(self, request: Any) -> Any:
        from dspy.lm15 import Message, Response, TextPart, Usage

        def text(parts: Any) -> str:
            return parts if isinstance(parts, str) else "".join(getattr(p, "text", "") for p in parts or ())

        messages = [{"role": "system", "content": text(request.system)}] if request.system else []
        messages += [{"role": m.role, "content": text(m.parts)} for m in request.messages]
        self.sent.append(messages)
        body = {"model": "served", "messages": messages, "max_tokens": request.config.max_tokens,
                "temperature": request.config.temperature}
        answer = httpx.post(f"{self.url}/chat/completions", json=body, timeout=120).json()
        return Response(id=None, model=request.model, finish_reason="stop", usage=Usage(input_tokens=0, output_tokens=0),
                        message=Message.assistant([TextPart(answer["choices"][0]["message"]["content"])]))

    def stream(self, request: Any) -> Any:
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))


def test_the_dspy_export_predicts_as_the_run_prompt_on_the_embedded_model(
        tmp_path: Path, data_dir: Path, llama_server: str) -> None:  # noqa: F811
    dspy = pytest.importorskip("dspy")
    run, spec, demos = _chat_run_dir(tmp_path, task="sst2", data_dir=str(data_dir), backend="openai",
                                     base_url=[llama_server], api="chat", model=EMBEDDED_MODEL, scoring="generate")
    program = _load_program(export(run, "dspy", tmp_path / "out")[1]).load()
    examples = task_of(read_run_config(run)).splits["test"][:6]
    engine = ChatServerEngine(llama_server)
    with dspy.context(lm=dspy.LM("served/embedded", engine=engine, cache=False, num_retries=0)):
        labels = [program(**example.fields).label for example in examples]
    # The run's shipped prompt, scored by prompttune as the run scored it (generation over chat).
    backend = build_backend(read_run_config(run))
    evaluator = Evaluator(backend, {e.id: e for e in examples}, {d.id: d for d in demos}, ResultCache(":memory:"),
                          BudgetLedger(), scoring="generate")
    records = evaluator.evaluate(spec, [e.id for e in examples])
    backend.close()
    assert engine.sent == [json.loads(backend.to_text(render(spec, e, demos))) for e in examples]
    assert labels == [None if r.pred is None else spec.label_words[r.pred] for r in records]
    assert len(set(labels)) > 1  # answers that name a label, and answers that do not
