"""The shapes of benchmarks/error_rates.py's rare conditions: +10-rare makes 3 of the 54-prompt space's prompts
10 points better, +10-rare72 3 of a 72-prompt space of another layout (`prompttune.testing.error_rate_space_72`),
and the new condition runs through `error_rate_run` (the real engine) like every other."""

from __future__ import annotations

from collections import Counter

import pytest

import prompttune.testing as testing
from benchmarks.error_rates import ALL_CONDITIONS, BUDGET, condition_args, one_run
from prompttune.search_spaces.prompt import render
from prompttune.testing import ERROR_RATE_SPACES, error_rate_accuracy, error_rate_space, synthetic_task


def accuracies(condition: str) -> dict[str, float]:
    """Each distinct prompt text of the condition's space (rendered on one test example) and its accuracy."""
    args = condition_args(condition)
    space = ERROR_RATE_SPACES[args["shape"]]()
    example = synthetic_task().splits["test"][0]
    accuracy = error_rate_accuracy(args["delta"], rare=args["rare"])
    texts = [render(space.build(a).spec, example, []).text for a in space.enumerate()]
    assert len(texts) == space.size().value
    return {text: accuracy(text) for text in texts}


@pytest.mark.parametrize(("condition", "prompts"), [("+10-rare", 54), ("+10-rare72", 72)])
def test_rare_conditions_make_3_prompts_10_points_better(condition: str, prompts: int) -> None:
    scores = accuracies(condition)
    assert len(scores) == prompts  # distinct prompt texts
    assert Counter(round(a, 6) for a in scores.values()) == {0.6: prompts - 3, 0.7: 3}
    better = [text for text, a in scores.items() if a > 0.6]
    assert all(t.startswith("Pick the colour") and t.endswith(" | Label:") for t in better)
    assert {t.split("\n")[1].split(":")[0] for t in better} == {"Input", "Text", "Item"}  # any field format


def test_the_72_prompt_space_is_another_layout() -> None:
    old, new = error_rate_space(), ERROR_RATE_SPACES["72"]()
    assert [len(d.values) for d in old.dimensions] == [3, 3, 3, 2]
    assert [len(d.values) for d in new.dimensions] == [3, 3, 4, 2]
    assert new.fingerprint() != old.fingerprint()
    assert condition_args("+10-rare72") == {"delta": 0.10, "rho": 0.0, "rare": True, "shape": "72"}
    assert "+10-rare72" in ALL_CONDITIONS


def test_the_new_condition_runs_through_the_engine_on_the_72_prompt_space(monkeypatch) -> None:
    """A few seeds of +10-rare72 through `one_run` (the benchmark's own path): the engine searched the 72-prompt
    space, and each run reports what the other conditions report."""
    searched, contracts = [], []
    run_oracle = testing.run_oracle

    def spy(*args, **kwargs):
        searched.append(kwargs["space"])
        contracts.append(kwargs["serve"])
        return run_oracle(*args, **kwargs)

    monkeypatch.setattr(testing, "run_oracle", spy)
    others = [one_run(("reflect", condition, 0, serve)) for condition, serve in (("null", "logprobs"),
                                                                                  ("+10-rare", "choice"))]
    runs = [one_run((name, "+10-rare72", seed, "choice")) for name in ("reflect", "sh") for seed in range(2)]
    assert [s.name for s in searched] == ["error-rates", "error-rates"] + ["error-rates-72"] * 4
    assert contracts == ["logprobs"] + ["choice"] * 5  # --serve reaches the engine
    assert all(s.size().value == 72 for s in searched[2:])
    for run in runs:
        assert run.keys() == others[0].keys() == others[1].keys()
        assert run["condition"] == "+10-rare72" and 0 < run["calls"] <= BUDGET
        assert run["ships_better"] <= run["confirmed"]
