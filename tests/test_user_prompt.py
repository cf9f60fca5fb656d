"""The user's own prompt is the baseline: templates read into a PromptSpec that renders them exactly, the space
derived around them, `--prompt FILE`, runs on the synthetic oracle, and custom tasks whose labels come from
the data."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from prompttune.commands.space import add_parser as add_space_commands
from prompttune.core.errors import UserError
from prompttune.core.types import Example
from prompttune.engine.comparison import CompareRequest, run_compare
from prompttune.engine.evaluate import load_evaluation_task, load_prompts
from prompttune.engine.setup import load_space
from prompttune.engine.study import run_study
from prompttune.results.evaluate import EvaluateConfig
from prompttune.results.run_record import read_run_config
from prompttune.search_spaces import default_space, render
from prompttune.search_spaces.prompt import select_demos
from prompttune.search_spaces.user_prompt import parse_user_prompt
from prompttune.tasks import SplitSizes, UserPrompt, load_run_task, load_task
from prompttune.tasks.user_prompt import read_prompt_file
from prompttune.testing import colours_task_file
from tests.support import oracle_config, oracle_for

WORDS = ("red", "green", "blue")
SIZES = SplitSizes(60, 60, 90)


def _filled(template: str, values: dict[str, str]) -> str:
    """The user's template as they expect to see it: fields and label words filled in."""
    text = template.strip().replace("{labels}", ", ".join(WORDS))
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


@pytest.mark.parametrize("template,fields,cue", [
    ("Name the colour of the item.\n\nItem: {text}\nColour:", ["text"], "Colour: {}"),
    ("Item: {text} Colour:", ["text"], "Colour: {}"),
    ("Item: {text}\nWhich colour is it, {labels}?\nAnswer:", ["text"], "Answer: {}"),
    ("Pick one of {labels}.\nItem: {text}\nWhich colour is it?\n\nAnswer:\n", ["text"], "Answer: {}"),
    ("Premise: {a} Hypothesis: {b}\nLabel:", ["a", "b"], "Label: {}"),
    ("Q: {a}\n\nContext: {b}\nAnswer:", ["a", "b"], "Answer: {}"),
    ("A: {a}\nthen\nB: {b}\n\nLabel:", ["a", "b"], "Label: {}"),
    ("Is the item '{text}' {labels}?\nAnswer:", ["text"], "Answer: {}"),
    ('Say the colour ({labels}) of "{text}"', ["text"], '" {}'),
    ("  Task:  \n\n Item: {text}  \nAnswer:   \n", ["text"], "Answer: {}"),
])
def test_a_template_renders_exactly_as_written(template: str, fields: list[str], cue: str) -> None:
    parsed = parse_user_prompt(UserPrompt(template, "test"), fields, WORDS)
    values = {f: f"the {f} of item 7" for f in fields}
    prompt = render(parsed.spec, Example("x", values, 0), [])
    assert prompt.text == _filled(template, values).rstrip(" ")
    assert parsed.spec.output_template == cue and prompt.label_continuations == (" red", " green", " blue")


def test_a_template_that_ends_with_its_input_gets_an_answer_cue_and_says_so() -> None:
    parsed = parse_user_prompt(UserPrompt("Name the colour.\nItem: {text}", "test"), ["text"], WORDS)
    assert render(parsed.spec, Example("x", {"text": "a ball"}, 0), []).text == "Name the colour.\nItem: a ball\nAnswer:"
    assert "the answer cue 'Answer:' follows it" in parsed.notes[-1]


@pytest.mark.parametrize("user,system", [
    ("Item: {text}", "You name colours ({{strict}})."),
    ("Name the colour.\n\nItem: {text}\n\nAnswer with one of: {labels}.", None),
    ("Item: {text}\nIs it {labels}?", None),
])
def test_a_chat_prompt_keeps_its_user_message_whole(user: str, system: str | None) -> None:
    parsed = parse_user_prompt(UserPrompt(user, "test", chat=True, system=system), ["text"], WORDS)
    prompt = render(parsed.spec, Example("x", {"text": "a ball"}, 0), [])
    assert prompt.messages == ((("system", "You name colours ({strict})."),) if system else ()) + (
        ("user", _filled(user, {"text": "a ball"})),)
    assert prompt.assistant_prefix == "" and prompt.label_continuations == WORDS


@pytest.mark.parametrize("template,system,message", [
    ("Item: {txt}\nAnswer:", None, r"test: unknown placeholder \{txt\}; use \{text\}, \{labels\}"),
    ("Item: {text}\nAgain: {text}", None, r"\{text\} appears twice"),
    ("Name the colour.\nAnswer:", None, r"the prompt lacks \{text\}"),
    ("Item: {text!r}", None, "takes no format spec"),
    ("Item: {text", None, "malformed template"),
    ("Item: {text} {{}}", None, "a literal"),
    ("Item: {text}", "Use {labels}.", "the system message takes no placeholders"),
])
def test_a_template_it_cannot_read_is_one_line_naming_its_source(template: str, system: str | None,
                                                                 message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_user_prompt(UserPrompt(template, "test", chat=system is not None, system=system), ["text"], WORDS)


def _task_file(folder: Path, body: str) -> Path:
    """A colours task (data written by `colours_task_file`) without `labels:`, plus `body`."""
    colours_task_file(folder)
    path = folder / "mine.yaml"
    path.write_text("name: colours\ndata: colours.csv\ntext_columns: [text]\nlabel_column: colour\n" + body)
    return path


PROMPT = "prompt: |\n  Name the colour of the item ({labels}).\n\n  Item: {text}\n  Colour:\n"


def test_the_derived_space_varies_what_it_detected_around_the_users_baseline(tmp_path: Path) -> None:
    task = load_task(str(_task_file(tmp_path, PROMPT)), sizes=SIZES)
    space = default_space(task).bind(task.splits["train"])
    assert task.labels == ["blue", "green", "red"] and task.verbalizers == [["blue"], ["green"], ["red"]]
    dims = {d.name: d.values for d in space.dimensions}
    assert dims["instruction"][0] == "Name the colour of the item ({labels})." and len(dims["instruction"]) == 3
    assert [t for ((_, t),) in dims["input_name"]] == ["Item: {}", "Text: {}", "Input: {}", "ITEM: {}", "item: {}"]
    assert dims["output_name"] == ("Colour: {}", "Answer: {}", "Label: {}", "COLOUR: {}", "colour: {}")
    assert dims["intra_separator"] == ("\n", " ")
    assert dims["label_words"] == (("blue", "green", "red"), ("Blue", "Green", "Red"))
    assert dims["few_shot.k"] == (0, 2, 4) and "chat" not in dims
    example = task.splits["dev"][0]
    baseline = render(space.default_candidate().spec, example, [])
    assert baseline.text == ("Name the colour of the item (blue, green, red).\n\nItem: " + example.fields["text"]
                             + "\nColour:")
    with_demos = space.build(space.assignment_of({"few_shot.k": 2})).spec
    shots = select_demos(with_demos, {e.id: e for e in task.splits["train"]})
    assert len(shots) == 2 and f"Item: {shots[0].fields['text']}\nColour: " in render(with_demos, example, shots).text


def test_format_dimensions_only_where_the_layout_was_detected(tmp_path: Path) -> None:
    chat = ("messages:\n  - {role: system, content: You name colours.}\n"
            "  - {role: user, content: 'Which colour is \"{text}\"?'}\n")
    space = default_space(load_task(str(_task_file(tmp_path, chat)), sizes=SIZES))
    assert [d.name for d in space.dimensions] == ["instruction", "label_words", "chat", "few_shot.k"]
    assert space.base.chat and space.base.system == "You name colours." and space.dimension("chat").values == (True,
                                                                                                                False)


def test_labels_written_outside_the_instruction_keep_their_words(tmp_path: Path) -> None:
    body = "prompt: \"Name the colour.\\nItem: {text}\\nOptions: {labels}\\nAnswer:\"\n"
    space = default_space(load_task(str(_task_file(tmp_path, body)), sizes=SIZES))
    assert "label_words" not in [d.name for d in space.dimensions]
    assert space.base.input_templates == (("text", "Item: {}\nOptions: blue, green, red"),)
    assert "label words stay as they are" in " ".join(space.notes)


def test_optimize_with_the_users_prompt_reports_it_as_the_baseline(tmp_path: Path) -> None:
    config = oracle_config(tmp_path, task=str(_task_file(tmp_path, PROMPT)), optimizer="random")
    result = run_study(config, backend=oracle_for(config))
    example = load_run_task(config).splits["test"][0]
    written = (result.run_dir / "baseline_prompt.txt").read_text()
    assert written == (f"Name the colour of the item (blue, green, red).\n\nItem: {example.fields['text']}\n"
                       "Colour:\n")
    report = (result.run_dir / "report.md").read_text()
    assert "## Baseline" in report and "The baseline is your prompt (`prompt:` of" in report
    assert json.loads((result.run_dir / "baseline_prompt.json").read_text())["notes"]


def test_prompt_file_replaces_the_tasks_prompt_for_the_run_its_resume_and_compare(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("Which colour is this item?\nItem: {text}\nAnswer:\n")
    config = oracle_config(tmp_path, task=str(_task_file(tmp_path, PROMPT)), prompt=str(tmp_path / "mine.txt"),
                           optimizer="random")
    result = run_study(config, backend=oracle_for(config))
    assert (result.run_dir / "baseline_prompt.txt").read_text().startswith("Which colour is this item?\nItem: ")
    resumed = read_run_config(result.run_dir)
    assert load_space(resumed, load_run_task(resumed)).notes[0].startswith(f"The baseline is your prompt (--prompt "
                                                                           f"{tmp_path / 'mine.txt'})")
    compared = run_compare(CompareRequest(config, ["random"], [0], {}, backend=oracle_for(config)))
    arm = compared.runs[0].run_dir
    assert (arm / "baseline_prompt.txt").read_text().startswith("Which colour is this item?\nItem: ")


@pytest.mark.parametrize("name,text,expected", [
    ("chat.yaml", "messages:\n  - {role: user, content: 'Item: {text}'}\n", UserPrompt("Item: {text}", "", chat=True)),
    ("plain.json", json.dumps({"prompt": "Item: {text}\nAnswer:"}), UserPrompt("Item: {text}\nAnswer:", "")),
])
def test_a_prompt_file_may_be_yaml_or_json(tmp_path: Path, name: str, text: str, expected: UserPrompt) -> None:
    (tmp_path / name).write_text(text)
    given = read_prompt_file(str(tmp_path / name))
    assert (given.template, given.chat) == (expected.template, expected.chat)
    assert given.source.endswith(f"of --prompt {tmp_path / name}")


@pytest.mark.parametrize("name,text,message", [
    ("nosuch.txt", None, "file not found"),
    ("empty.txt", "  \n", "the file is empty"),
    ("none.yaml", "{}\n", "give `prompt:` .* or `messages:`"),
    ("both.yaml", "prompt: 'Item: {text}'\nmessages: [{role: user, content: x}]\n", "not both"),
    ("roles.yaml", "messages: [{role: user, content: x}, {role: system, content: y}]\n", "then one user message"),
    ("assistant.yaml", "messages: [{role: assistant, content: x}]\n", "messages.0.role"),
])
def test_a_bad_prompt_file_is_one_line(tmp_path: Path, name: str, text: str | None, message: str) -> None:
    if text is not None:
        (tmp_path / name).write_text(text)
    with pytest.raises(UserError, match=f"--prompt .*{name}: .*{message}"):
        read_prompt_file(str(tmp_path / name))


def test_prompt_and_space_both_set_the_baseline(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("Item: {text}\nAnswer:\n")
    config = oracle_config(tmp_path, prompt=str(tmp_path / "mine.txt"), space="space.yaml")
    with pytest.raises(UserError, match="both set the baseline"):
        load_space(config, load_run_task(config))


def _space_command(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    add_space_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(list(argv))
    return args.handler(args)


def test_space_show_without_a_file_prints_the_space_derived_for_the_task(tmp_path: Path, capsys) -> None:
    task = _task_file(tmp_path, PROMPT)
    assert _space_command("space", "show", "--task", str(task), "--train-size", "20", "--dev-size", "10",
                          "--test-size", "10") == 0
    out = capsys.readouterr().out
    assert "colours-your-prompt" in out and f"valid candidates: {3 * 5 * 5 * 2 * 2 * 3:,} (exact)" in out
    assert "The baseline is your prompt" in out
    with pytest.raises(UserError, match="give a space FILE or --task"):
        _space_command("space", "show")


def test_labels_come_from_the_data_and_must_tell_labels_apart(tmp_path: Path) -> None:
    one = _task_file(tmp_path, "")
    (tmp_path / "reds.csv").write_text("text,colour\n" + "".join(f"item {i},red\n" for i in range(30)))
    one.write_text(one.read_text().replace("colours.csv", "reds.csv"))
    with pytest.raises(UserError, match="holds one value \\(red\\); a classification task needs at least two"):
        load_task(str(one), sizes=SIZES)
    shared = _task_file(tmp_path, "labels: {red: [warm, red], green: [cool], blue: [cool]}\n")
    with pytest.raises(UserError, match="labels 'green' and 'blue' share the verbalizer word 'cool'"):
        load_task(str(shared), sizes=SIZES)


def test_a_description_is_the_baseline_instruction_of_the_built_in_space(tmp_path: Path) -> None:
    task = load_task(str(_task_file(tmp_path, "description: Name the colour ({labels}).\n")), sizes=SIZES)
    assert default_space(task).default_candidate().spec.instruction == "Name the colour ({labels})."
    with pytest.raises(UserError, match=r"description: the instruction may hold \{labels\} only, not \{text\}"):
        load_task(str(_task_file(tmp_path, "description: Name the colour of {text}.\n")), sizes=SIZES)


def test_evaluate_samples_the_space_derived_around_the_prompt_file(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("Which colour is this item?\nItem: {text}\nAnswer:\n")
    config = EvaluateConfig(task=str(colours_task_file(tmp_path)), prompt=str(tmp_path / "mine.txt"), sample=5,
                            train_size=60, dev_size=60, test_size=90)
    sampled = load_prompts(config, load_evaluation_task(config))
    assert len(sampled) == 5 and all("instruction=" in p.source and "few_shot.k=" in p.source for p in sampled)
