"""Built-in grammars: FormatSpread validity rules, the 1,440 wrappers, template parts, golden renderings."""

from __future__ import annotations

import pytest

from prompttune.search_spaces import SearchSpace, build_space, render
from prompttune.search_spaces.grammars.format import FIELD_SEPARATORS, SPACES
from prompttune.search_spaces.prompt import select_demos
from tests.test_spaces import fake_task

FORMAT = {"name": "fmt", "instructions": ["Name the colour ({labels})."], "label_words": "task",
          "grammars": {"format": {"fields": {"text": ["Item"]}, "output": ["Colour"]}},
          "few_shot": {"k": [0, 1]}}
PASSAGES = fake_task("passages", ("1", "2", "3"), ("p1", "p2", "p3", "question"))
WRAPPER = {"name": "w", "base": {"instruction": "Which passage fits?"},
           "grammars": {"wrapper": {"passages": ["p1", "p2", "p3"], "answer": "index"}}}


def format_space() -> SearchSpace:
    task = fake_task()
    return build_space(FORMAT, task).bind(task.splits["train"])


@pytest.mark.parametrize("invalid,rule", [
    ({"format.separator": ""}, "no empty field separator"),
    ({"format.separator": "\n\t", "format.space": " || "}, "a newline in the separator needs one in the space"),
    ({"format.space": ""}, "no empty space between fields"),
    ({"format.enumerator": "none", "format.wrapper": "[x]"}, "format.wrapper='(x)'"),
])
def test_each_format_rule_rejects_its_documented_case(invalid: dict, rule: str) -> None:
    space = format_space()
    assignment = space.assignment_of(invalid)
    assert not space.is_valid(assignment)
    broken = [r.describe() for r in space.constraints if not r(space.values_of(assignment))]
    assert len(broken) == 1 and rule in broken[0]


def test_format_rules_keep_the_valid_neighbours_of_those_cases() -> None:
    space = format_space()
    assert space.is_valid(space.assignment_of({"format.separator": "\n\t", "format.space": " \n"}))
    assert space.is_valid(space.assignment_of({"format.enumerator": "A", "format.wrapper": "[x]"}))


def test_format_grammar_counts_exactly() -> None:
    seps_with_newline = sum("\n" in s for s in FIELD_SEPARATORS)
    spaces_without_newline = sum("\n" not in s for s in SPACES if s)
    pairs = (len(FIELD_SEPARATORS) - 1) * (len(SPACES) - 1) - seps_with_newline * spaces_without_newline
    assert pairs == 160
    # pairs × casings × (no options + 5 enumerators × 5 wrappers) × k ∈ {0, 1} × 2^3 label words
    assert format_space().size().value == pairs * 4 * (1 + 5 * 5) * 2 * 8


def test_golden_format_rendering_with_a_demo() -> None:
    space = format_space()
    task = fake_task()
    candidate = space.build(space.assignment_of({
        "format.separator": ":: ", "format.space": " || ", "format.casing": "upper",
        "format.enumerator": "A", "format.wrapper": "(x)", "few_shot.k": 1, "label.green": "GREEN"}))
    prompt = render(candidate.spec, task.splits["dev"][0],
                    select_demos(candidate.spec, {e.id: e for e in task.splits["train"]}))
    assert prompt.text == ("Name the colour (red, GREEN, blue).\n"
                           "ITEM:: text train 0.2 || OPTIONS:: (A) red || (B) GREEN || (C) blue || COLOUR:: red"
                           "\n\n"
                           "ITEM:: text dev 0.0 || OPTIONS:: (A) red || (B) GREEN || (C) blue || COLOUR::")
    assert prompt.label_continuations == (" red", " GREEN", " blue")


def test_golden_format_rendering_vertical_layout() -> None:
    space = format_space()
    candidate = space.build(space.assignment_of({
        "format.separator": "\n\t", "format.space": "\n", "format.casing": "title",
        "format.enumerator": "i", "format.wrapper": "x."}))
    prompt = render(candidate.spec, fake_task().splits["dev"][0], [])
    assert prompt.text == ("Name the colour (red, green, blue).\nItem\n\ttext dev 0.0\n"
                           "Options\n\ti. red\nii. green\niii. blue\nColour\n\t")
    assert prompt.label_continuations == ("red", "green", "blue")


def test_wrapper_family_counts_exactly_1440() -> None:
    space = build_space(WRAPPER, PASSAGES)
    assert space.nominal_size() == 1440
    size = space.size()
    assert size.exact and size.value == 1440
    assert len({space.build(a).spec for a in space.enumerate()}) == 1440  # all renderings differ


def test_golden_wrapper_rendering_answers_with_the_shown_marker() -> None:
    space = build_space(WRAPPER, PASSAGES)
    candidate = space.build(space.assignment_of({
        "wrapper.header": "Source", "wrapper.index": "(a)", "wrapper.separator": " | ",
        "wrapper.chunk": "\n\n", "wrapper.casing": "upper", "wrapper.position": "after"}))
    prompt = render(candidate.spec, PASSAGES.splits["dev"][0], [])
    assert prompt.text == ("SOURCE (a) | p1 dev 0.0\n\nSOURCE (b) | p2 dev 0.0\n\nSOURCE (c) | p3 dev 0.0"
                           "\n\nQuestion: question dev 0.0\nWhich passage fits?\nAnswer:")
    assert prompt.label_continuations == (" a", " b", " c")
    baseline = render(space.default_candidate().spec, PASSAGES.splits["dev"][0], [])
    assert baseline.text.startswith("Which passage fits?\nDocument 1: p1 dev 0.0\nDocument 2: p2")


def test_template_inter_separator_only_with_demos() -> None:
    task = fake_task("sst2", ("negative", "positive"))
    without = build_space({"name": "t", "grammars": {"template": {}}}, task)
    assert "template.inter" not in [d.name for d in without.dimensions]
    space = build_space({"name": "t", "label_words": {"negative": ["terrible"], "positive": ["great"]},
                         "grammars": {"template": {}}, "few_shot": {"k": [0, 2]}}, task)
    # 4 inputs × (4 generic + 5 sentiment outputs) × 2 intra × (k=0: 1 inter, k=2: 3 inters)
    assert space.size().value == 4 * 9 * 2 * (1 + 3)
    assert not space.is_valid(space.assignment_of({"few_shot.k": 0, "template.inter": " "}))


def test_golden_template_rendering_with_two_demos() -> None:
    task = fake_task("sst2", ("negative", "positive"))
    space = build_space({"name": "t", "label_words": {"negative": ["terrible"], "positive": ["great"]},
                         "grammars": {"template": {}}, "few_shot": {"k": [0, 2]}}, task)
    space = space.bind(task.splits["train"])
    candidate = space.build(space.assignment_of({
        "template.input": "sentence: {}", "template.output": "It was {}.", "template.intra": " ",
        "template.inter": "\n", "few_shot.k": 2}))
    prompt = render(candidate.spec, task.splits["dev"][0],
                    select_demos(candidate.spec, {e.id: e for e in task.splits["train"]}))
    assert prompt.text == ("sentence: text train 1.4 It was great.\nsentence: text train 0.2 It was terrible.\n"
                           "sentence: text dev 0.0 It was")
    assert prompt.label_continuations == (" terrible", " great")


def test_format_and_template_cannot_both_write_the_fields() -> None:
    with pytest.raises(Exception, match="use one of them"):
        build_space({"name": "x", "grammars": {"format": {}, "template": {}}}, fake_task())


def test_wrapper_combines_with_format_for_the_other_fields() -> None:
    config = {**WRAPPER, "grammars": {**WRAPPER["grammars"], "format": {"enumerators": ["none"]}}}
    space = build_space(config, PASSAGES)
    candidate = space.build(space.assignment_of({"format.separator": " - ", "format.casing": "upper"}))
    text = render(candidate.spec, PASSAGES.splits["dev"][0], []).text
    assert text.endswith("Document 3: p3 dev 0.0\nQUESTION - question dev 0.0\nANSWER -")
