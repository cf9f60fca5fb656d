"""export: a run's winning prompt as text, JSON and a loadable DSPy program."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import asdict
from pathlib import Path

import pytest

from prompttune.engine.export import export
from prompttune.search_spaces import default_space
from prompttune.search_spaces.prompt import render
from tests.support import oracle_config, task_of


def _run_dir(tmp_path: Path) -> tuple[Path, object, list]:
    """A run directory as `optimize` leaves it: config.json and best_prompt.json with two demos."""
    config = oracle_config(tmp_path)
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
    [path] = export(run, "text", tmp_path / "out")
    text = path.read_text()
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


def test_dspy_export_loads_as_a_dspy_program(tmp_path: Path) -> None:
    pytest.importorskip("dspy")
    run, spec, demos = _run_dir(tmp_path)
    written = export(run, "dspy", tmp_path / "out")
    loader = importlib.util.spec_from_file_location("exported_program", written[1])
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    program = module.load()
    assert program.signature.instructions == spec.instruction.replace("{labels}", "red, green, blue")
    assert [d["text"] for d in program.demos] == [d.fields["text"] for d in demos]
    assert [d["label"] for d in program.demos] == [spec.label_words[d.label] for d in demos]
