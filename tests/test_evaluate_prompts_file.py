"""Prompts files: accepted forms, byte-exact rendering, and one-line errors for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from prompttune.core.errors import UserError
from prompttune.core.types import Example
from prompttune.scoring.prompt_sources import load_prompts_file, template_spec
from prompttune.search_spaces.prompt import render
from prompttune.tasks.task import Task

TASK = Task("news", ["World", "Sports"], [["World", "world"], ["Sports", "sport"]], ["text"], {})
PAIR_TASK = Task("nli", ["no", "yes"], [["No"], ["Yes"]], ["premise", "hypothesis"], {})
EXAMPLE = Example("e1", {"text": "Rain {falls} on Paris"}, 0)


def _file(tmp_path: Path, body: str, name: str = "prompts.yaml") -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


def test_rendering_is_byte_exact() -> None:
    spec = template_spec("Article: {text}\nTopic ({labels}):", ["text"], ["World", "Sports"])
    prompt = render(spec, EXAMPLE, [])
    assert prompt.text == "Article: Rain {falls} on Paris\nTopic (World, Sports):"
    assert prompt.label_continuations == (" World", " Sports")
    trailing = render(template_spec("{{News}} {text} -> ", ["text"], ["A", "B"]), EXAMPLE, [])
    assert trailing.text == "{News} Rain {falls} on Paris ->" and trailing.label_continuations == (" A", " B")
    pair = template_spec("Premise: {premise}\nHypothesis: {hypothesis}\nEntailed?", PAIR_TASK.input_fields,
                         ["No", "Yes"])
    both = Example("p", {"premise": "It rains.", "hypothesis": "It is wet."}, 1)
    assert render(pair, both, []).text == "Premise: It rains.\nHypothesis: It is wet.\nEntailed?"


def test_file_forms_and_label_words(tmp_path: Path) -> None:
    plain = load_prompts_file(_file(tmp_path, '- "A: {text}\\nTopic:"\n- "B: {text}"\n'), TASK)
    assert [p.name for p in plain] == ["p01", "p02"]
    assert plain[0].spec.label_words == ("World", "Sports")  # first verbalizers by default
    assert plain[0].source == "A: {text}\nTopic:"
    mapping = load_prompts_file(_file(tmp_path, "label_words: {Sports: sport, World: world}\nprompts:\n"
                                      "  - {name: short, template: '{text}'}\n  - 'Q: {text}'\n"), TASK)
    assert [p.name for p in mapping] == ["short", "p02"] and mapping[0].spec.label_words == ("world", "sport")
    listed = load_prompts_file(_file(tmp_path, '{"label_words": ["W", "S"], "prompts": ["{text} ?"]}',
                                     "p.json"), TASK)
    assert listed[0].spec.label_words == ("W", "S")


@pytest.mark.parametrize("body,message", [
    ('- "Article: {txt}"\n', "unknown placeholder {txt}; use {text}, {labels}"),
    ('- "Topic: {labels}"\n', "template lacks {text}"),
    ('- "Article: {text"\n', "malformed template"),
    ('- "Article: {text!r}"\n', "takes no format spec"),
    ('- "Article: {}"\n', "unknown placeholder {}"),
    ('- "x {{}} {text}"\n', "literal '{}'"),
    ('"just one string"\n', "expected a list of templates"),
    ("[]\n", "prompts: List should have at least 1 item"),
    ("prompt: ['{text}']\n", "prompts: Field required"),
    ('- "A {text}"\n- "A {text}"\n', "repeats the template of prompt 'p01'"),
    ('- {name: x, template: "A {text}"}\n- {name: x, template: "B {text}"}\n', "repeats the name"),
    ("label_words: [a]\nprompts: ['{text}']\n", "1 words for 2 labels"),
    ("label_words: {World: a}\nprompts: ['{text}']\n", "must map exactly the labels"),
    ("label_words: [a, a]\nprompts: ['{text}']\n", "must be distinct"),
    ("label_words: [' a', b]\nprompts: ['{text}']\n", "no surrounding spaces"),
    ("- 'a: [unclosed'\n- : :\n  - x", "cannot read YAML"),
])
def test_bad_prompts_files_are_one_line_user_errors(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(UserError) as info:
        load_prompts_file(_file(tmp_path, body), TASK)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_missing_file_and_bad_json(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found"):
        load_prompts_file(tmp_path / "nope.yaml", TASK)
    with pytest.raises(UserError, match="cannot read JSON"):
        load_prompts_file(_file(tmp_path, "[1,", "p.json"), TASK)


def test_shipped_agnews_prompts_parse() -> None:
    agnews = Task("agnews", ["World", "Sports", "Business", "Sci/Tech"],
                  [["World"], ["Sports"], ["Business"], ["Technology"]], ["text"], {})
    prompts = load_prompts_file(Path(__file__).parent.parent / "examples/prompts/agnews_prompts.yaml", agnews)
    assert len(prompts) >= 10 and len({p.spec for p in prompts}) == len(prompts)
