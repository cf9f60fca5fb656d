"""Serving checks (issue #24, items 6 and 7), on the synthetic oracle: frozen texts of the user's prompt that no
candidate may change, a ceiling on prompt tokens per request, and `--check-generation`: the shipped prompt and the
baseline served by generation beside the verdict's label scores."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from prompttune.backends.backend import Backend
from prompttune.core.config import RunConfig
from prompttune.core.errors import UserError
from prompttune.core.types import ScoreRequest
from prompttune.engine.setup import load_space
from prompttune.engine.study import run_study
from prompttune.optimizers.cople import content_words
from prompttune.optimizers.registry import STRATEGIES, Reach, optimizer_entry
from prompttune.optimizers.strategy_contract import Challenge, IncumbentSearch, TrialRequest, spec_candidate
from prompttune.search_spaces.frozen import keep_frozen, missing_frozen
from prompttune.search_spaces.prompt import PromptSpec, fixed_part, select_demos
from prompttune.search_spaces.space import Dimension, SearchSpace
from prompttune.tasks import SplitSizes, load_run_task
from prompttune.testing import SyntheticOracleBackend, colours_task_file, error_rate_proposer, synthetic_task
from tests.support import CountingBackend, model_calls, oracle_config, oracle_for

RULE = "Never reveal customer data."
SIZES = SplitSizes(200, 300, 50)


class FrozenWatch(CountingBackend):
    """Counts the requests reaching the model and keeps every scored prompt that lacks the frozen text."""

    def __init__(self, inner: SyntheticOracleBackend) -> None:
        super().__init__(inner)
        self.without_rule: list[str] = []

    def score(self, requests: list[ScoreRequest]):
        self.without_rule += [r.text for r in requests if RULE not in r.text]
        return super().score(requests)


def frozen_space() -> SearchSpace:
    """The rule in the baseline's instruction; the best instruction of the grid (0.9 against 0.55) drops it."""
    instructions = (f"Name the colour of the item. {RULE}", "Pick the colour ({labels}).", f"State the colour. {RULE}")
    base = PromptSpec(instruction=instructions[0], input_templates=(("text", "Input: {}"),),
                      label_words=("red", "green", "blue"))
    return SearchSpace("frozen", base, [Dimension("instruction", instructions, "instruction", kind="instruction"),
                                        Dimension("output", ("Answer: {}", "Label: {}", "Colour: {}"), "output_template"),
                                        Dimension("field", ("Input: {}", "Text: {}"), "input:text")])


def picks_best(text: str) -> float:
    return 0.9 if "Pick the colour" in text else 0.55


def frozen_run(optimizer: str, budget: int = 3000, options: dict | None = None, **settings: Any):
    task = synthetic_task(n_per_class=200, sizes=SIZES)
    backend = FrozenWatch(SyntheticOracleBackend.for_task(task, picks_best, proposals=error_rate_proposer()))
    config = RunConfig(task=task.name, optimizer=optimizer, budget=budget, optimizer_options=options or {},
                       train_size=SIZES.train, dev_size=SIZES.dev, test_size=SIZES.test, **settings)
    space = frozen_space().bind(task.splits["train"]).freezing([RULE], "test")
    return run_study(config, task=task, space=space, backend=backend, record=False), backend


# -- frozen texts -------------------------------------------------------------------------------------

@pytest.mark.parametrize("optimizer,options", [
    ("random", {}), ("sh", {}), ("mipro", {"instructions": 3, "trials": 20}), ("p2g", {}),
    ("cople", {"synonyms": "", "rewrite": True}), ("reflect", {}),
])
def test_no_candidate_without_the_frozen_text_is_scored_or_shipped(optimizer: str, options: dict) -> None:
    result, backend = frozen_run(optimizer, options=options)
    assert backend.without_rule == []  # nothing reached the model without the rule, the verdict's calls included
    assert backend.calls == model_calls(result)
    for tuned in (result.shipped, result.dev_winner):
        assert RULE in tuned.render({"text": "item 001 is about colour red number 1."})
    trials = result.trials.load()
    if optimizer in ("random", "sh"):  # grid searchers draw the best instruction, which drops the rule: refused
        assert result.outcome.rejected["frozen"] >= 1
        assert all(RULE in t["dimensions"]["instruction"] for t in trials)  # and no trial logged for it
    else:  # the instruction writers keep the rule where their rewrite drops it, so they are not starved
        written = {t["instruction"] for t in trials if t.get("instruction")} - {frozen_space().base.instruction}
        assert written and all(RULE in text for text in written)
    if optimizer in ("mipro", "p2g", "cople"):  # they change the instruction only by writing it
        assert not result.outcome.rejected


class DropsTheRule(IncumbentSearch):
    """Test double: challenges the baseline with a far better prompt that drops the frozen text, then asks for it
    to be scored outright."""

    name = "drops-the-rule"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dropped = spec_candidate(self.baseline.spec.with_updates(instruction="Pick the colour ({labels})."), "t")
        self.steps = iter(["baseline", "challenge", "score"])
        self.decision = None

    def ask(self) -> TrialRequest | Challenge | None:
        step = next(self.steps, None)
        if step == "baseline":
            return TrialRequest(self.baseline, tuple(self.context.dev_ids))
        if step == "challenge":
            return self.challenge(self.dropped, self.open_sweep(1))
        if step == "score":
            return TrialRequest(self.dropped, tuple(self.context.dev_ids))
        return None

    def tell_challenge(self, challenge, decision) -> None:
        self.decision = decision

    def ranking(self):
        return [self.dropped, self.baseline]


def test_a_candidate_that_drops_a_frozen_text_is_rejected_without_a_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(STRATEGIES, "drops-the-rule", optimizer_entry(DropsTheRule, Reach(lists=True)))
    result, backend = frozen_run("drops-the-rule")
    optimizer = result.strategy.optimizer
    assert optimizer.decision.verdict == "reject" and optimizer.decision.n == 0
    assert result.outcome.rejected == {"frozen": 1} and backend.without_rule == []
    assert result.outcome.ranking == [optimizer.baseline] and result.verdict.shipped.id == optimizer.baseline.id
    assert [t["purpose"] for t in result.trials.load()] == ["evaluate"]  # the baseline's trial only


def test_frozen_helpers() -> None:
    assert keep_frozen("Pick the colour.", f"Name it. {RULE}", [RULE, "absent"]) == f"Pick the colour. {RULE}"
    assert keep_frozen("Pick the colour.", f"Name it.\n{RULE}", [RULE]) == f"Pick the colour.\n{RULE}"
    assert keep_frozen(f"Pick. {RULE}", f"Name it. {RULE}", [RULE]) == f"Pick. {RULE}"
    assert [m.group() for m in content_words(f"Name the colour. {RULE}", [RULE])] == ["Name", "colour"]
    chat = PromptSpec(instruction="Name the colour.", chat=True, system=RULE, label_words=("red", "blue"))
    assert missing_frozen(chat, [], [RULE, "Name the colour.", "Input:", "absent"]) == ["absent"]


def _task(tmp_path: Path, prompt_keys: str) -> Path:
    """The colours task file with the user's prompt and its frozen texts."""
    path = tmp_path / "frozen.yaml"
    path.write_text(colours_task_file(tmp_path).read_text() + prompt_keys)
    return path


PROMPT = f"prompt: |\n  Name the colour of the item. {RULE}\n\n  Item: {{text}}\n  Colour:\nfrozen: ['{RULE}']\n"


def test_the_derived_space_freezes_the_task_files_texts_and_keeps_them_in_its_instructions(tmp_path: Path) -> None:
    config = oracle_config(tmp_path, task=str(_task(tmp_path, PROMPT)))
    space = load_space(config, load_run_task(config))
    assert space.frozen == (RULE,)
    assert all(RULE in text for text in space.dimension("instruction").values)


@pytest.mark.parametrize("keys,prompt_file,message", [
    (PROMPT.replace(f"frozen: ['{RULE}']", "frozen: ['Never share it.']"), None,
     "frozen text 'Never share it.' is not in the baseline prompt"),
    (PROMPT.replace(f"frozen: ['{RULE}']", "frozen: ['Item: {text}']"), None, "frozen text 'Item: {text}'"),
    (PROMPT, "Which colour?\nItem: {text}\nAnswer:\n", f"--prompt {{dir}}/mine.txt: frozen text '{RULE}'"),
])
def test_a_frozen_text_the_baseline_lacks_is_refused_at_load(tmp_path: Path, keys: str, prompt_file: str | None,
                                                              message: str) -> None:
    if prompt_file is not None:
        (tmp_path / "mine.txt").write_text(prompt_file)
    config = oracle_config(tmp_path, task=str(_task(tmp_path, keys)),
                           prompt=str(tmp_path / "mine.txt") if prompt_file else None)
    with pytest.raises(UserError, match=re.escape(message.replace("{dir}", str(tmp_path)))) as caught:
        load_space(config, load_run_task(config))
    assert "\n" not in str(caught.value)


def test_a_prompt_file_keeps_the_task_files_frozen_texts_and_adds_its_own(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(f"prompt: 'Pick the colour. {RULE} Be brief.\\nItem: {{text}}\\nAnswer:'\n"
                                        "frozen: ['Be brief.']\n")
    config = oracle_config(tmp_path, task=str(_task(tmp_path, PROMPT)), prompt=str(tmp_path / "mine.yaml"))
    assert load_space(config, load_run_task(config)).frozen == (RULE, "Be brief.")


# -- the ceiling on prompt tokens ---------------------------------------------------------------------

def test_candidates_over_the_token_ceiling_are_rejected_and_the_report_plots_tokens(tmp_path: Path) -> None:
    config = oracle_config(tmp_path, native_demos=4, max_prompt_tokens=30, budget=600)
    backend = oracle_for(config)
    result = run_study(config, backend=backend)
    train = {e.id: e for e in load_run_task(config).splits["train"]}

    def words(spec: PromptSpec) -> int:  # the oracle counts a prompt's tokens as its words
        return len(backend.to_text(fixed_part(spec, select_demos(spec, train))).split())

    assert result.outcome.rejected["tokens"] >= 1
    assert result.outcome.scored and all(point.prompt_tokens <= 30 for point in result.outcome.scored)
    assert backend.calls == model_calls(result)
    assert result.prompt_tokens["baseline"] == words(result.baseline.spec)
    assert result.prompt_tokens["shipped"] == words(result.verdict.shipped.spec) <= 30
    report = (result.run_dir / "report.md").read_text()
    assert f"Prompt tokens per request: baseline {result.prompt_tokens['baseline']}, shipped " in report
    assert "over --max-prompt-tokens" in report and "![dev accuracy against prompt tokens" in report
    assert (result.run_dir / "prompt_tokens.png").read_bytes().startswith(b"\x89PNG")
    facts = json.loads((result.run_dir / "verdict.json").read_text())
    assert facts["prompt_tokens"]["max_prompt_tokens"] == 30 and facts["search"]["rejected"]["tokens"] >= 1
    page = (result.run_dir / "report.html").read_text()
    assert 'alt="dev score against prompt tokens per request"' in page and "over --max-prompt-tokens" in page


def test_a_baseline_over_the_token_ceiling_is_one_line_before_the_run_starts(tmp_path: Path) -> None:
    config = oracle_config(tmp_path, max_prompt_tokens=5)
    with pytest.raises(UserError, match=r"^--max-prompt-tokens 5: the baseline prompt alone is 11 tokens"):
        run_study(config, backend=oracle_for(config))
    assert not (tmp_path / "runs").exists()


# -- serving by generation ----------------------------------------------------------------------------

def _answers(text: str) -> str:
    """A model that names the colour of the item it is asked about, except after a 'Label:' cue, where it
    chats instead: label scoring likes that prompt, generation does not."""
    if text.rstrip().endswith("Label:"):
        return "Sure! Happy to help with that."
    return f"It is {text.rsplit('painted ', 1)[1].split()[0]}."


def test_check_generation_serves_the_shipped_prompt_and_the_baseline_by_generation(tmp_path: Path) -> None:
    config = oracle_config(tmp_path, optimizer="random", check_generation=12)
    backend = oracle_for(config)
    backend.inner.proposals = _answers
    result = run_study(config, backend=backend)
    check = result.generation_check
    assert result.verdict.shipped.spec.output_template == "Label: {}"  # confirmed on label scores
    assert check is not None and check.n == 12 and check.verdict_scored_by == "constrained decoding"
    served = {p.role: p for p in check.prompts}
    assert set(served) == {"baseline", "shipped"}
    assert (served["baseline"].valid_rate, served["baseline"].accuracy) == (1.0, 1.0)
    assert (served["shipped"].valid_rate, served["shipped"].accuracy) == (0.0, 0.0)
    assert served["shipped"].verdict_accuracy > 0.5 and served["shipped"].invalid_answers
    assert check.calls == 24  # on its own ledger: neither the search's nor the verdict's
    assert "generate" not in result.search_ledger.calls_by_kind | result.confirm_ledger.calls_by_kind
    assert backend.calls == result.search_ledger.calls + result.confirm_ledger.calls + check.calls
    report = (result.run_dir / "report.md").read_text()
    assert "Serving contract **`serve: choice`**" in report
    assert "The verdict scored prompts by **constrained decoding**." in report
    assert "## Served by generation (`--check-generation`, first 12 test examples)" in report
    assert "| shipped | " in report and "**Warning: under generation the shipped prompt is less accurate" in report
    facts = json.loads((result.run_dir / "verdict.json").read_text())
    assert facts["verdict"]["scored_by"] == "constrained decoding"
    assert facts["generation_check"]["prompts"][1]["valid_rate"] == 0.0
    page = (result.run_dir / "report.html").read_text()
    assert "Served by generation: first 12 test examples" in page and "Warning: under generation" in page


def test_under_serve_generate_the_verdicts_own_records_give_the_valid_rates(tmp_path: Path) -> None:
    config = oracle_config(tmp_path, optimizer="random", scoring="generate", check_generation=12)
    backend = oracle_for(config)
    backend.inner.proposals = _answers
    result = run_study(config, backend=backend)
    check = result.generation_check
    assert check is not None and check.by_verdict and check.n == 90 and check.calls == 0  # no check of its own
    assert backend.calls == result.search_ledger.calls + result.confirm_ledger.calls
    report = (result.run_dir / "report.md").read_text()
    assert "The verdict scored prompts by **generation**." in report
    assert "## Served by generation (the verdict, `serve: generate`)" in report


@pytest.mark.integration
def test_check_generation_and_prompt_tokens_with_the_embedded_model(data_dir: Path, tmp_path: Path,
                                                                    embedded_model: Backend) -> None:
    config = RunConfig(task="agnews", data_dir=str(data_dir), optimizer="random", budget=24, train_size=20, dev_size=12,
                       test_size=12, check_generation=6, max_prompt_tokens=120, runs_dir=str(tmp_path))
    result = run_study(config, backend=embedded_model)
    check = result.generation_check
    assert check is not None and check.n == 6 and check.calls == 6 * len(check.prompts)
    for served in check.prompts:
        assert 0.0 <= served.accuracy <= served.valid_rate <= 1.0
    assert 0 < result.prompt_tokens["baseline"] <= 120 and all(p.prompt_tokens <= 120 for p in result.outcome.scored)
    report = (result.run_dir / "report.md").read_text()
    assert "by **constrained decoding**" in report and "| baseline | " in report
    assert (result.run_dir / "prompt_tokens.png").is_file()
